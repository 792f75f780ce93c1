//! Crash containment. A panic anywhere in syscatch (a parser fed by the target, the analysis, a renderer) must
//! not leave the target with our int3s: the panic hook only records the first panic's message (no multi-line
//! report on stderr), the tracer's thread catches its own panic and detaches with whatever state is left, another
//! thread's panic reaches the tracer as a stop request ([`crate::os::signals::fault`]), and `main` turns the
//! recorded message into the one line the user sees, with exit status 1.

use std::sync::{Mutex, Once};

static FIRST: Mutex<Option<String>> = Mutex::new(None);
static HOOK: Once = Once::new();

/// Installs the recording panic hook (once per process).
pub fn contain() {
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
            let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            let text = format!("{msg} (thread {thread}{at})").replace('\n', " ");
            if let Ok(mut first) = FIRST.lock() {
                first.get_or_insert(text);
            }
        }));
    });
}

/// The first panic's message, once.
pub fn take() -> Option<String> {
    FIRST.lock().ok().and_then(|mut f| f.take())
}
