//! A live process as a [`ModuleSource`]: its maps from `/proc/PID/maps`, each file read as the target sees it
//! ([`resolve::read_module`], build-id checked against what is mapped), debug files looked up under the
//! process's root, and the vDSO (which has no file) read from its memory: it never changes while the process
//! lives.

use crate::analysis::modules::ModuleSource;
use crate::analysis::symbolize;
use crate::live::resolve;
use crate::model::modules::{Module, ModuleMap};
use crate::os::mem::{self, ProcMem};
use crate::os::{Tid, procfs};
use std::sync::Arc;

pub struct LiveModules {
    pid: Tid,
}

impl LiveModules {
    pub fn new(pid: Tid) -> LiveModules {
        LiveModules { pid }
    }

    pub fn boxed(pid: Tid) -> Box<dyn ModuleSource> {
        Box::new(LiveModules::new(pid))
    }
}

impl ModuleSource for LiveModules {
    fn maps(&mut self) -> Option<String> {
        procfs::read_maps(self.pid).ok()
    }

    fn module(&mut self, g: &ModuleMap) -> Result<Module, String> {
        if g.path == "[vdso]" {
            let len = usize::try_from(g.end - g.start).map_err(|_| "vdso too large")?;
            let image = mem::read_upto(self.pid, g.start, len);
            if image.len() != len {
                return Err("cannot read the vDSO image from the target's memory".into());
            }
            return Module::parse(g.clone(), image.into()).map_err(|e| e.to_string());
        }
        let mem = ProcMem::open(self.pid).ok();
        resolve::read_module(self.pid, g, mem.as_ref()).map_err(|e| format!("{e:#}"))
    }

    fn debug_file(&mut self, path: &str, data: &[u8]) -> Option<(String, Arc<[u8]>)> {
        let root = format!("/proc/{}/root", self.pid);
        symbolize::find_debug_file(&root, path, data, |p| std::fs::read(p).ok())
    }
}
