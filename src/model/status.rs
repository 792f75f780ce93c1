//! Parses `/proc/PID/status` text. Pure.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    /// `R`, `S`, `D`, `Z`, `T`, `t`, `X`, ...
    pub state: char,
    pub tgid: i32,
    pub pid: i32,
    pub ppid: i32,
    pub tracer_pid: i32,
    /// Signals pending for this thread alone (bit `n-1` for signal `n`).
    pub sig_pnd: u64,
    /// Signals with a handler (`SigCgt`) or ignored (`SigIgn`), process-wide.
    pub sig_cgt: u64,
    pub sig_ign: u64,
    /// Kernel threads have no address space, hence no `VmSize` line.
    pub has_vm: bool,
}

pub fn parse_status(text: &str) -> Status {
    let mut s = Status::default();
    for line in text.lines() {
        let Some((key, val)) = line.split_once(':') else {
            continue;
        };
        let val = val.trim();
        match key {
            "Name" => s.name = val.to_string(),
            "State" => s.state = val.chars().next().unwrap_or('?'),
            "Tgid" => s.tgid = val.parse().unwrap_or(0),
            "Pid" => s.pid = val.parse().unwrap_or(0),
            "PPid" => s.ppid = val.parse().unwrap_or(0),
            "TracerPid" => s.tracer_pid = val.parse().unwrap_or(0),
            "SigPnd" => s.sig_pnd = u64::from_str_radix(val, 16).unwrap_or(0),
            "SigCgt" => s.sig_cgt = u64::from_str_radix(val, 16).unwrap_or(0),
            "SigIgn" => s.sig_ign = u64::from_str_radix(val, 16).unwrap_or(0),
            "VmSize" => s.has_vm = true,
            _ => {}
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields() {
        let s = parse_status(
            "Name:\tpython3\nState:\tS (sleeping)\nTgid:\t10\nPid:\t12\nPPid:\t1\nTracerPid:\t99\n\
             SigPnd:\t0000000000000010\nVmSize:\t 1000 kB\n",
        );
        assert_eq!(s.name, "python3");
        assert_eq!(s.state, 'S');
        assert_eq!((s.tgid, s.pid, s.tracer_pid), (10, 12, 99));
        assert_eq!(s.sig_pnd, 1 << (libc::SIGTRAP - 1));
        assert!(s.has_vm);
        assert_eq!(parse_status("junk"), Status::default());
    }
}

/// The CPUs of a status file's `Cpus_allowed_list` line (`0-3,8`); `None` when it is missing or malformed.
pub fn parse_cpus_allowed(status: &str) -> Option<Vec<usize>> {
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?.trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        // Bounded: a corrupt range must not allocate without limit.
        if b < a || b >= 4096 {
            return None;
        }
        cpus.extend(a..=b);
    }
    Some(cpus)
}

#[cfg(test)]
mod cpus_tests {
    #[test]
    fn cpus_allowed_lists() {
        let p = |s: &str| super::parse_cpus_allowed(s);
        assert_eq!(p("Name:\tx\nCpus_allowed_list:\t0-2,5\n"), Some(vec![0, 1, 2, 5]));
        assert_eq!(p("Cpus_allowed_list:\t1\n"), Some(vec![1]));
        assert_eq!(p("Cpus_allowed_list:\t3-1\n"), None);
        assert_eq!(p("Cpus_allowed_list:\t0-99999\n"), None);
        assert_eq!(p("Cpus_allowed:\tf\n"), None);
    }
}
