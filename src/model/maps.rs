//! Parses `/proc/PID/maps` text into [`Mapping`]s. Pure: callers do the I/O.

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// `rwxp`-style permission string, e.g. `r-xp`.
    pub perms: String,
    pub offset: u64,
    pub dev: String,
    pub inode: u64,
    /// Path or pseudo-name (`[heap]`, `[stack]`, `[vdso]`); empty for anonymous memory. Kept verbatim,
    /// including a ` (deleted)` suffix.
    pub path: String,
}

impl Mapping {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }
    /// Backed by a file (not anonymous, not a `[pseudo]` region).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }
}

/// Parses one maps line; `None` if it is malformed.
pub fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let r = rest.trim_start_matches(' ');
        let end = r.find(' ').unwrap_or(r.len());
        let (f, tail) = r.split_at(end);
        rest = tail;
        f
    };
    let range = field();
    let perms = field().to_string();
    let offset = u64::from_str_radix(field(), 16).ok()?;
    let dev = field().to_string();
    let inode = field().parse().ok()?;
    let path = rest.trim_start_matches(' ').to_string();
    let (s, e) = range.split_once('-')?;
    let start = u64::from_str_radix(s, 16).ok()?;
    let end = u64::from_str_radix(e, 16).ok()?;
    if end < start || perms.len() != 4 {
        return None;
    }
    Some(Mapping { start, end, perms, offset, dev, inode, path })
}

/// Parses the whole maps text, skipping malformed lines.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_maps_line).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines() {
        let text = "\
55d0c7a00000-55d0c7a01000 r--p 00000000 fe:01 1234                       /usr/bin/my prog (deleted)
7f0000000000-7f0000021000 rw-p 00000000 00:00 0 
7ffd1c9e0000-7ffd1ca01000 rw-p 00000000 00:00 0                          [stack]
garbage line
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].path, "/usr/bin/my prog (deleted)");
        assert_eq!(m[0].inode, 1234);
        assert!(m[0].is_file());
        assert_eq!(m[1].path, "");
        assert_eq!(m[1].len(), 0x21000);
        assert_eq!(m[2].path, "[stack]");
        assert!(parse_maps_line("1000-0 r--p 0 0 0").is_none());
    }
}
