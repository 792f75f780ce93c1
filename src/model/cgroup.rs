//! Parses what says how much memory a process may use: `/proc/PID/cgroup`, the cgroup mounts of
//! `/proc/self/mountinfo`, the limit files of cgroup v2 (`memory.max`) and v1 (`memory.limit_in_bytes`), and
//! `/proc/meminfo`. Pure.

/// Where a process's memory is accounted: its cgroup v2 path, and its v1 memory controller's path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    pub v2: Option<String>,
    pub v1_memory: Option<String>,
}

/// `/proc/PID/cgroup`: `0::/path` is v2, `N:memory:/path` (or `N:a,memory:/path`) v1's memory controller.
pub fn parse_membership(text: &str) -> Membership {
    let mut m = Membership::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        if id == "0" && controllers.is_empty() {
            m.v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            m.v1_memory = Some(path.to_string());
        }
    }
    m
}

/// Mount points from `/proc/self/mountinfo`: cgroup v2's, and v1's memory controller's (with the root of the
/// hierarchy each shows, `/` outside a container).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    pub v2: Option<(String, String)>,
    pub v1_memory: Option<(String, String)>,
}

pub fn parse_mounts(mountinfo: &str) -> Mounts {
    let mut m = Mounts::default();
    for line in mountinfo.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let fields: Vec<&str> = left.split(' ').collect();
        let theirs: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(point), Some(fstype)) = (fields.get(3), fields.get(4), theirs.first()) else {
            continue;
        };
        let here = (unescape(root), unescape(point));
        match *fstype {
            "cgroup2" if m.v2.is_none() => m.v2 = Some(here),
            "cgroup" if theirs.get(2).is_some_and(|o| o.split(',').any(|o| o == "memory")) => {
                m.v1_memory.get_or_insert(here);
            }
            _ => {}
        }
    }
    m
}

/// mountinfo writes a space, tab, newline and backslash in a path as `\040`-style octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directory of cgroup `path` under a hierarchy mounted at `point` that shows `root` (a container sees
/// its own cgroup as `/`, its mount showing the same path as root).
pub fn cgroup_dir(point: &str, root: &str, path: &str) -> String {
    let rel = path.strip_prefix(root).filter(|_| root != "/").unwrap_or(path);
    format!("{}/{}", point.trim_end_matches('/'), rel.trim_start_matches('/')).trim_end_matches('/').to_string()
}

/// A limit file's value in bytes: `None` for no limit (v2's `max`, v1's page-counter maximum, near 2^63).
pub fn parse_limit(text: &str) -> Option<u64> {
    let v: u64 = text.trim().parse().ok()?;
    (v < 1 << 62).then_some(v)
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memberships_and_mounts_of_v1_v2_and_a_container() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/7e17\n1:cpu,cpuacct:/\n0::/\n";
        let m = parse_membership(hybrid);
        assert_eq!((m.v2.as_deref(), m.v1_memory.as_deref()), (Some("/"), Some("/process_api/7e17")));
        assert_eq!(parse_membership("0::/system.slice/x.service\n").v2.as_deref(), Some("/system.slice/x.service"));
        let info = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n\
                    31 25 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                    35 25 0:30 /kubepods/pod\\0401 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let mounts = parse_mounts(info);
        assert_eq!(mounts.v1_memory, Some(("/".into(), "/sys/fs/cgroup/memory".into())));
        assert_eq!(mounts.v2, Some(("/kubepods/pod 1".into(), "/sys/fs/cgroup".into())));
        assert_eq!(
            cgroup_dir("/sys/fs/cgroup/memory", "/", "/process_api/7e17"),
            "/sys/fs/cgroup/memory/process_api/7e17"
        );
        assert_eq!(cgroup_dir("/sys/fs/cgroup", "/kubepods/pod 1", "/kubepods/pod 1/app"), "/sys/fs/cgroup/app");
        assert_eq!(cgroup_dir("/sys/fs/cgroup", "/", "/"), "/sys/fs/cgroup");
    }

    #[test]
    fn limits_and_memavailable() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("268435456\n"), Some(256 << 20));
        assert_eq!(parse_limit("lots"), None);
        assert_eq!(parse_mem_available("MemTotal: 100 kB\nMemAvailable:   2048 kB\n"), Some(2 << 20));
        assert_eq!(parse_mem_available("MemTotal: 100 kB\n"), None);
    }
}
