# A threaded Python web server (http.server's ThreadingHTTPServer: a thread per request) whose /leak endpoint keeps
# 64 KiB of every request in a module-level cache, and whose /churn endpoint builds and drops the same. Prints
# "pid N" and "port P"; on stdin "lines" prints "leak LINE" (the line that keeps the buffer) and "done"; "quit" or
# end of input stops it.
import http.server
import os
import sys
import threading

CACHE = []


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/leak":
            CACHE.append(bytearray(64 << 10))  # KEEP LINE
        elif self.path == "/churn":
            sum(bytearray(64 << 10))
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
print("pid", os.getpid(), flush=True)
print("port", server.server_address[1], flush=True)
for line in sys.stdin:
    if line.strip() == "lines":
        keep = next(i for i, l in enumerate(open(__file__), 1) if l.rstrip().endswith("# KEEP LINE"))
        print("leak %d" % keep, flush=True)
        print("cached %d" % (len(CACHE) * (64 << 10)), flush=True)
        print("done", flush=True)
    else:
        break
server.shutdown()
