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
