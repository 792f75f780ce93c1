//! The `syscatch` command (0: done as asked, 1: runtime error, 2: bad usage; with `-- CMD`, the command's own
//! status). Everything lives in the library: see `app`.

fn main() {
    syscatch::main()
}
