//! Parser tables (valid scripts and errors at exact positions), printer round-trips over the shipped examples,
//! handwritten and generated scripts, and a no-panic loop over random and damaged input.

use super::*;
use crate::model::regs::Reg;
use std::time::Duration;

fn probe(text: &str) -> ProbeDecl {
    let s = parse_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(s.probes.len(), 1);
    s.probes.into_iter().next().unwrap()
}

fn cond(text: &str) -> Expr {
    probe(&format!("probe p at syscall(mmap) if {text} {{}}")).condition.unwrap()
}

fn var(v: Var) -> Box<Expr> {
    Box::new(Expr::Var(v))
}
fn int(v: u64) -> Box<Expr> {
    Box::new(Expr::Int(v))
}
fn bin(op: BinOp, a: Box<Expr>, b: Box<Expr>) -> Box<Expr> {
    Box::new(Expr::Binary(op, a, b))
}

#[test]
fn valid_scripts() {
    // (script, the probe's canonical form)
    let table: &[(&str, &str)] = &[
        ("probe at syscall(mmap) {}", "probe mmap at syscall(mmap) {\n}\n"),
        (
            "probe big_maps at syscall(mmap, munmap) if arg1 >= 1048576 { collect args, ret, stack(64); max 1000; sample 1 in 10 }",
            "probe big_maps at syscall(mmap, munmap) if arg1 >= 1M {\n    collect args, ret, stack(64)\n    max 1000\n    sample 1 in 10\n}\n",
        ),
        (
            "probe at libc.so.6:munmap { collect args, ret }",
            "probe munmap at libc.so.6:munmap {\n    collect args, ret\n}\n",
        ),
        (
            "probe at libucs:ucs_mpool_grow+0x10 { collect regs(rdi, r12) }",
            "probe \"ucs_mpool_grow+0x10\" at libucs:ucs_mpool_grow+0x10 {\n    collect regs(rdi, r12)\n}\n",
        ),
        ("probe at 0x7f00001234 {}", "probe \"0x7f00001234\" at 0x7f00001234 {\n}\n"),
        (
            "# comment\nprobe x at SYS_a.b:foo.cold + 16 # trailing\n{\n collect stack\n collect args;;\n max 5 events\n}",
            "probe x at SYS_a.b:foo.cold+0x10 {\n    collect args, stack\n    max 5\n}\n",
        ),
        ("probe x at libstdc++.so.6:_Znwm if rdi > 4K {}", "probe x at libstdc++.so.6:_Znwm if rdi > 4096 {\n}\n"),
        (
            "probe x at /usr/lib/x86_64-linux-gnu/libc.so.6:free {}",
            "probe x at /usr/lib/x86_64-linux-gnu/libc.so.6:free {\n}\n",
        ),
        ("probe x at syscall {}", "probe x at syscall {\n}\n"),
        ("probe x at syscall (9, 0x19) {}", "probe x at syscall(mmap, mremap) {\n}\n"),
        (
            "probe \"a b\" at \"my lib\":\"weird \\\"sym\\\"\" {}",
            "probe \"a b\" at \"my lib\":\"weird \\\"sym\\\"\" {\n}\n",
        ),
        ("probe at at {}", "probe \"at\" at at {\n}\n"),
        ("probe if at foo {}", "probe if at foo {\n}\n"),
        (
            "probe x at syscall(SYS_mmap) if nr == SYS_mmap && arg3 & MAP_ANONYMOUS {}",
            "probe x at syscall(mmap) if nr == 9 && arg3 & 32 {\n}\n",
        ),
    ];
    for (text, want) in table {
        let p = probe(text);
        assert_eq!(print::probe(&p), *want, "{text}");
    }
}

#[test]
fn settings() {
    let s = parse_str("set duration 10s\nset format json\nset smaps_every 500ms\nprobe at foo {}").unwrap();
    assert_eq!(s.settings.duration, Some(Duration::from_secs(10)));
    assert_eq!(s.settings.json, Some(true));
    assert_eq!(s.settings.smaps_every, Some(Duration::from_millis(500)));
    let s = parse_str("probe at foo {}\nset format text\nset duration 2m").unwrap();
    assert_eq!(s.settings.json, Some(false));
    assert_eq!(s.settings.duration, Some(Duration::from_secs(120)));
    for (d, want) in [("1h", 3_600_000), ("3", 3000), ("250us", 0), ("7ns", 0)] {
        let s = parse_str(&format!("set duration {d}\nprobe at f {{}}")).unwrap();
        if want > 0 {
            assert_eq!(s.settings.duration, Some(Duration::from_millis(want)));
        }
        assert_eq!(parse_str(&print(&s)).unwrap(), s);
    }
}

#[test]
fn locations_collect_and_limits() {
    let p = probe("probe x at libucs:ucs_mpool_grow+0x10 { collect regs(rdi, rsp), args; max 3; sample 1 in 7 }");
    assert_eq!(
        p.location,
        Location::Function { module: Some("libucs".into()), symbol: "ucs_mpool_grow".into(), offset: 16 }
    );
    assert_eq!(p.collect, Collect { args: true, ret: false, stack: None, regs: vec![Reg::Rdi, Reg::Rsp] });
    assert_eq!((p.max_events, p.sample_one_in), (Some(3), Some(7)));
    assert_eq!(p.span, Span { line: 1, col: 1 });
    let p = probe("probe x at syscall(mmap, 11, SYS_mremap) { collect stack, ret }");
    assert_eq!(p.location, Location::Syscall { numbers: vec![9, 11, 25] });
    assert_eq!(p.collect.stack, Some(DEFAULT_STACK_DEPTH));
    assert!(p.collect.ret);
    assert_eq!(probe("probe x at 4096 {}").location, Location::Address(4096));
    // Auto names are unique and avoid explicit ones, wherever those are.
    let s = parse_str("probe at foo {}\nprobe at foo {}\nprobe foo_3 at bar {}\nprobe at foo {}").unwrap();
    let names: Vec<&str> = s.probes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["foo", "foo_2", "foo_3", "foo_4"]);
    let s = parse_str("\n\n  probe a at f {}").unwrap();
    assert_eq!((s.probes[0].span.line, s.probes[0].span.col), (3, 3));
}

#[test]
fn precedence_is_c() {
    use BinOp::*;
    let (a0, a1) = (|| var(Var::Arg(0)), || var(Var::Arg(1)));
    // `&` binds looser than `==`, as in C.
    assert_eq!(cond("arg0 & 1 == 1"), *bin(BitAnd, a0(), bin(Eq, int(1), int(1))));
    assert_eq!(cond("(arg0 & 1) == 1"), *bin(Eq, bin(BitAnd, a0(), int(1)), int(1)));
    assert_eq!(
        cond("arg0 || arg1 && 2 | 3 ^ 4 & 5"),
        *bin(Or, a0(), bin(And, a1(), bin(BitOr, int(2), bin(BitXor, int(3), bin(BitAnd, int(4), int(5))))))
    );
    assert_eq!(cond("1 - 2 - 3"), *bin(Sub, bin(Sub, int(1), int(2)), int(3)));
    assert_eq!(cond("1 << 2 + 3 * 4"), *bin(Shl, int(1), bin(Add, int(2), bin(Mul, int(3), int(4)))));
    assert_eq!(cond("1 < 2 == 3 >= 4"), *bin(Eq, bin(Lt, int(1), int(2)), bin(Ge, int(3), int(4))));
    assert_eq!(
        cond("-!~rdi % 3"),
        *bin(
            Rem,
            Box::new(Expr::Unary(
                UnOp::Neg,
                Box::new(Expr::Unary(UnOp::Not, Box::new(Expr::Unary(UnOp::BitNot, var(Var::Reg(Reg::Rdi))))))
            )),
            int(3)
        )
    );
    let get = |v: Var| match v {
        Var::Arg(1) => 2 << 20,
        Var::Arg(3) => 0x22,
        Var::Nr => 9,
        _ => 0,
    };
    assert_eq!(eval(&cond("nr == SYS_mmap && arg1 >= 1048576 && arg3 & 0x20"), &get), 1);
    assert_eq!(eval(&cond("nr == SYS_munmap || arg1 < 1M"), &get), 0);
    assert_eq!(eval(&cond("1_000 + 0b101 + 0x10 + 2K + 1G"), &get), 1000 + 5 + 16 + 2048 + (1 << 30));
}

#[test]
fn errors_at_exact_positions() {
    // (script, line, column, message fragment)
    let table: &[(&str, usize, usize, &str)] = &[
        ("", 1, 1, "at least one probe"),
        ("# only a comment\n", 2, 1, "at least one probe"),
        ("probe", 1, 6, "expected `at` or a probe name after `probe`, found end of file"),
        ("probe x foo", 1, 9, "expected `at` after the probe name, found `foo`"),
        ("probe x at", 1, 11, "expected a location"),
        ("probe x at {", 1, 12, "expected a location"),
        ("probe x at libc.so.6: {}", 1, 22, "expected a symbol name after `libc.so.6:`"),
        ("probe x at foo+ {}", 1, 17, "expected an offset after `+`, found `{`"),
        ("probe x at foo+0xZ {}", 1, 16, "invalid number `0xZ`"),
        ("probe x at 0x1G1 {}", 1, 12, "invalid number"),
        ("probe x at 99999999999999999999 {}", 1, 12, "does not fit in 64 bits"),
        ("probe x at syscall() {}", 1, 20, "expected a syscall name or number, found `)`"),
        ("probe x at syscall(mmap munmap) {}", 1, 25, "expected `,` or `)`"),
        ("probe x at syscall(mmapp) {}", 1, 20, "unknown syscall `mmapp`"),
        ("probe x at syscall(mmap, 9) {}", 1, 26, "`mmap` is listed twice"),
        ("probe x at syscall(5000) {}", 1, 20, "below 1024"),
        ("probe x at foo collect", 1, 16, "expected `if` or `{` after the location, found `collect`"),
        ("probe x at foo if arg0 collect", 1, 24, "expected `{` after the condition, found `collect`"),
        ("probe x at foo if {}", 1, 19, "expected a number, a name or `(`, found `{`"),
        ("probe x at foo if arg6 {}", 1, 19, "`arg6` is out of range"),
        ("probe x at foo if arg00 {}", 1, 19, "`arg00` is out of range"),
        ("probe x at foo if nr == 9 {}", 1, 19, "`nr` is only defined at `syscall(...)`"),
        ("probe x at 0x10 if\n  (rdi == 1) || nr {}", 2, 17, "`nr` is only defined"),
        ("probe x at foo if rdi = 9 {}", 1, 23, "comparison is `==`"),
        ("probe x at foo if SYS_nosuch {}", 1, 19, "unknown syscall `nosuch`"),
        ("probe x at foo if bogus {}", 1, 19, "unknown name `bogus`"),
        ("probe x at foo if ret > 0 {}", 1, 19, "collect it with `collect ret`"),
        ("probe x at foo if (arg0 {}", 1, 25, "expected `)` to close the `(` at column 19"),
        ("probe x at foo if arg0 / 0 {}", 1, 26, "division by zero"),
        ("probe x at foo if arg0 % (0) {}", 1, 26, "division by zero"),
        ("probe x at foo if arg0 $ 1 {}", 1, 24, "unexpected character '$'"),
        ("probe x at foo if \"s {}", 1, 19, "unterminated string"),
        ("probe x at foo { collect }", 1, 26, "expected `args`, `ret`, `stack` or `regs(...)`"),
        ("probe x at foo { collect args, }", 1, 32, "expected `args`"),
        ("probe x at foo { collect args, args }", 1, 32, "`args` is already collected"),
        ("probe x at foo { collect rdi }", 1, 26, "write `regs(rdi)`"),
        ("probe x at foo { collect regs(rdi, rdi) }", 1, 36, "`rdi` is already collected"),
        ("probe x at foo { collect regs(eax) }", 1, 31, "expected a register"),
        ("probe x at foo { collect stack(0) }", 1, 32, "1 to 1024 frames"),
        ("probe x at foo { collect stack(64 }", 1, 35, "expected `)` after the number of frames"),
        ("probe x at foo+4 { collect ret }", 1, 28, "`ret` needs a function entry"),
        ("probe x at 0x1000 {\n\tcollect args, ret }", 2, 16, "`ret` needs a function entry or `syscall(...)`"),
        ("probe x at foo { max 0 }", 1, 22, "at least 1"),
        ("probe x at foo { max }", 1, 22, "expected a number after `max`, found `}`"),
        ("probe x at foo { max 1; max 2 }", 1, 25, "`max` is already given at line 1"),
        ("probe x at foo { sample 2 in 10 }", 1, 25, "expected `1`"),
        ("probe x at foo { sample 1 of 10 }", 1, 27, "expected `in` after `sample 1`"),
        ("probe x at foo { sample 1 in 0 }", 1, 30, "at least 1"),
        ("probe x at foo { stop }", 1, 18, "expected `collect`, `max`, `sample` or `}`, found `stop`"),
        ("probe x at foo {\n collect args\n", 3, 1, "expected `}` to close the probe body opened at line 1 column 16"),
        ("probe x at foo {}\nprobe x at bar {}", 2, 7, "a probe named `x` is already declared at line 1"),
        ("probe \"\" at foo {}", 1, 7, "cannot be empty"),
        ("set\nprobe x at f {}", 2, 1, "expected a setting"),
        ("set verbose 1", 1, 5, "expected a setting"),
        ("set duration soon", 1, 14, "expected a duration"),
        ("set duration 10x", 1, 14, "bad duration `10x`"),
        ("set duration 0ms", 1, 14, "must be more than zero"),
        ("set format yaml", 1, 12, "expected `json` or `text`, found `yaml`"),
        ("set format json\nset format text", 2, 1, "`format` is already set at line 1"),
        ("collect args", 1, 1, "expected `probe` or `set`, found `collect`"),
        ("probe x at f {} }", 1, 17, "expected `probe` or `set`, found `}`"),
        ("probe x at \"lib:f {}", 1, 12, "unterminated string"),
        ("probe x at \"a\\q\":f {}", 1, 14, "unknown escape"),
        (
            "probe x at f if ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1 {}",
            1,
            81,
            "nested too deeply",
        ),
    ];
    for &(text, line, col, msg) in table {
        let e = parse_str(text).expect_err(text);
        assert!(
            (e.line, e.col) == (line, col) && e.message.contains(msg),
            "{text:?}: want {line}:{col} {msg:?}, got {}:{}: {}",
            e.line,
            e.col,
            e.message
        );
    }
}

#[test]
fn error_display_shows_the_line_and_a_caret() {
    let e = parse("x.probe", "probe a at f {}\n\tprobe b at g if arg9 {}\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "x.probe:2:18: `arg9` is out of range: the arguments are arg0..arg5\n 2 | \tprobe b at g if arg9 {}\n   | \t                ^"
    );
    assert_eq!(e.one_line(), "x.probe:2:18: `arg9` is out of range: the arguments are arg0..arg5");
    // A column counts characters, not bytes.
    let e = parse_str("probe \"é\" at f if é {}").unwrap_err();
    assert_eq!((e.line, e.col), (1, 19));
}

#[test]
fn deep_but_flat_expressions_are_bounded() {
    let ok = vec!["arg0 == 1"; 200].join(" || ");
    assert!(parse_str(&format!("probe x at f if {ok} {{}}")).is_ok());
    let deep = vec!["1"; 400].join(" + ");
    let e = parse_str(&format!("probe x at f if {deep} {{}}")).unwrap_err();
    assert!(e.message.contains("too deep"), "{}", e.message);
}

fn examples() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/probes");
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "probe"))
        .map(|p| (p.display().to_string(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    v.sort();
    assert!(v.len() >= 3, "the shipped examples are in {dir}");
    v
}

#[test]
fn examples_parse_check_and_round_trip() {
    for (file, text) in examples() {
        let s = parse(&file, &text).unwrap_or_else(|e| panic!("{e}"));
        check_script(&s).unwrap();
        let printed = print(&s);
        assert_eq!(parse_str(&printed).unwrap(), s, "{file} reprinted:\n{printed}");
        assert_eq!(print(&parse_str(&printed).unwrap()), printed, "printing is stable");
    }
}

#[test]
fn handwritten_round_trips() {
    let texts = [
        "set duration 90s\nset smaps_every 1500ms\nprobe \"x\\ty\" at \"a:b\":\"c d\"+1 if -(1 - 2) - -3 {}",
        "probe x at f if !(arg0 && arg1) || ~(rdi | rsi) ^ 0xffffffffffffffff {}",
        "probe x at f if arg0 * (arg1 + 2) / 3 % 4 << (5 >> 1) != (1 < 2) {}",
        "probe x at f if (1 == 2) == (3 != 4) & (5 & 6) {}",
        "probe x at f if 0x7f0000001234 - 1G + 3M + 65535 + 65536 {}",
        "probe x at 18446744073709551615 { collect regs(rax, rbx, rcx, rdx, rsi, rdi, rbp, rsp, r8, r9, r10, r11, r12, r13, r14, r15, rip) }",
        "probe x at syscall(0, 450, 1000) {}",
        "probe \"a.b\" at f {} probe \"1\" at g {} probe \"at\" at h {}",
    ];
    for t in texts {
        let s = parse_str(t).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parse_str(&print(&s)).unwrap(), s, "{t}\nprinted:\n{}", print(&s));
    }
}

/// xorshift64*: a deterministic generator, so a failure is reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

fn gen_expr(r: &mut Rng, depth: usize, syscall: bool) -> Expr {
    match if depth == 0 { r.below(2) } else { r.below(5) } {
        0 => {
            let any = r.next();
            Expr::Int(*r.pick(&[0, 1, 9, 4096, 65535, 65536, 1 << 20, 3 << 30, u64::MAX, any]))
        }
        1 => Expr::Var(match r.below(3) {
            0 if syscall => Var::Nr,
            0 | 1 => Var::Arg(r.below(6) as u8),
            _ => Var::Reg(r.pick(&REGS).1),
        }),
        2 => Expr::Unary(*r.pick(&[UnOp::Not, UnOp::BitNot, UnOp::Neg]), Box::new(gen_expr(r, depth - 1, syscall))),
        _ => {
            let op = *r.pick(&BinOp::ALL);
            let mut b = gen_expr(r, depth - 1, syscall);
            if matches!(op, BinOp::Div | BinOp::Rem) && b == Expr::Int(0) {
                b = Expr::Int(1);
            }
            Expr::Binary(op, Box::new(gen_expr(r, depth - 1, syscall)), Box::new(b))
        }
    }
}

fn gen_word(r: &mut Rng, chars: &str) -> String {
    let chars: Vec<char> = chars.chars().collect();
    (0..1 + r.below(12)).map(|_| *r.pick(&chars)).collect()
}

fn gen_script(r: &mut Rng) -> Script {
    let dur = |r: &mut Rng| {
        r.below(2).eq(&0).then(|| {
            *r.pick(&[
                Duration::from_secs(10),
                Duration::from_millis(1500),
                Duration::from_micros(7),
                Duration::from_nanos(3),
                Duration::from_secs(7200),
            ])
        })
    };
    let settings = Settings { duration: dur(r), json: *r.pick(&[None, Some(true), Some(false)]), smaps_every: dur(r) };
    let mut probes = Vec::new();
    for i in 0..1 + r.below(4) {
        let location = match r.below(3) {
            0 => {
                let mut numbers: Vec<u64> = (0..1 + r.below(4)).map(|_| r.below(1024) as u64).collect();
                numbers.dedup();
                numbers.sort_unstable();
                numbers.dedup();
                Location::Syscall { numbers }
            }
            1 => Location::Function {
                module: r.below(2).eq(&0).then(|| gen_word(r, "abc.-+_/~19 :\"\\")),
                symbol: gen_word(r, "xyz_.$@0 +:\"\t"),
                offset: *r.pick(&[0, 0, 1, 0x10, u64::MAX]),
            },
            _ => Location::Address(r.next()),
        };
        let entry = matches!(location, Location::Syscall { .. } | Location::Function { offset: 0, .. });
        let syscall = matches!(location, Location::Syscall { .. });
        let mut regs: Vec<Reg> = (0..r.below(4)).map(|_| r.pick(&REGS).1).collect();
        regs.dedup();
        let regs = regs.iter().enumerate().filter(|(i, x)| !regs[..*i].contains(x)).map(|(_, x)| *x).collect();
        probes.push(ProbeDecl {
            name: format!("{}{i}", gen_word(r, "ab_9 \"")),
            condition: if r.below(3) != 0 {
                let depth = 1 + r.below(6);
                Some(gen_expr(r, depth, syscall))
            } else {
                None
            },
            collect: Collect {
                args: r.below(2) == 0,
                ret: entry && r.below(2) == 0,
                stack: *r.pick(&[None, Some(1), Some(DEFAULT_STACK_DEPTH), Some(MAX_STACK_DEPTH)]),
                regs,
            },
            max_events: *r.pick(&[None, Some(1), Some(u64::MAX)]),
            sample_one_in: *r.pick(&[None, Some(1), Some(10)]),
            span: Span::default(),
            location,
        });
    }
    Script { settings, probes }
}

#[test]
fn generated_round_trips() {
    let mut r = Rng(0x9E3779B97F4A7C15);
    for _ in 0..2000 {
        let s = gen_script(&mut r);
        if check_script(&s).is_err() {
            continue;
        }
        let text = print(&s);
        let back = parse_str(&text).unwrap_or_else(|e| panic!("{e}\nin:\n{text}\nfrom {s:#?}"));
        assert_eq!(back, s, "printed:\n{text}");
    }
}

#[test]
fn no_input_panics() {
    let mut r = Rng(42);
    let mut inputs: Vec<String> = Vec::new();
    let alphabet: Vec<char> =
        "probe at if set { } ( ) , ; : + - * / % & | ^ ~ ! < > = \" \\ # \n 0x1 9 arg0 nr rdi SYS_mmap é"
            .chars()
            .collect();
    for (_, text) in examples() {
        let chars: Vec<char> = text.chars().collect();
        for n in 0..=chars.len() {
            inputs.push(chars[..n].iter().collect());
        }
        for _ in 0..300 {
            let mut c = chars.clone();
            for _ in 0..1 + r.below(4) {
                let at = r.below(c.len() + 1);
                match r.below(3) {
                    0 if at < c.len() => {
                        c.remove(at);
                    }
                    1 if at < c.len() => c[at] = *r.pick(&alphabet),
                    _ => c.insert(at, *r.pick(&alphabet)),
                }
            }
            inputs.push(c.into_iter().collect());
        }
    }
    for _ in 0..3000 {
        let bytes: Vec<u8> = (0..r.below(80)).map(|_| r.next() as u8).collect();
        inputs.push(String::from_utf8_lossy(&bytes).into_owned());
        inputs.push((0..r.below(60)).map(|_| *r.pick(&alphabet)).collect());
    }
    inputs.push("(".repeat(100_000));
    inputs.push("probe x at f if ".to_string() + &"-".repeat(100_000) + "1 {}");
    inputs.push("probe x at f if ".to_string() + &"1+".repeat(100_000) + "1 {}");
    for text in &inputs {
        match parse_str(text) {
            Ok(s) => {
                check_script(&s).unwrap();
                assert_eq!(parse_str(&print(&s)).as_ref(), Ok(&s), "{text:?}");
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
}

/// Resolving and planning read each mapped file once (through `live::modules::ModuleCache`), however many probes
/// are in it. This test process's own libc; the only lib test on the shared cache.
#[test]
fn locations_and_plan_read_a_module_once() {
    use crate::live::modules::ModuleCache;
    let pid = crate::os::Tid::try_from(std::process::id()).expect("pid fits");
    let script =
        parse_str("probe a at libc.so.6:munmap {}\nprobe b at libc.so.6:mmap {}\nprobe c at munmap {}").unwrap();
    // The modules mapped before and after (other tests in this process map files meanwhile, libc's debug file
    // among them): each is read at most once.
    let mapped = || -> std::collections::BTreeSet<(String, u64)> {
        let maps = crate::live::resolve::read_maps(pid).expect("own maps");
        crate::model::modules::group_modules(&maps).into_iter().map(|m| (m.path, m.start)).collect()
    };
    let modules_before = mapped();
    let before = ModuleCache::shared().file_reads();
    let resolved = resolve_locations(pid, &script).expect("libc's own functions resolve");
    let after_resolve = ModuleCache::shared().file_reads();
    let mem = crate::os::mem::ProcMem::open(pid).expect("own memory");
    let plan = run::plan(pid, &script, &resolved, None, &mem, false).expect("plans");
    assert_eq!(plan.specs.len(), 2, "a and c share munmap's site");
    // `c` (no module named) reads every module once; `a` and `b` add nothing, nor does the plan.
    let modules = modules_before.union(&mapped()).count();
    assert!(after_resolve - before <= modules as u64, "{} reads for {modules} modules", after_resolve - before);
    assert_eq!(ModuleCache::shared().file_reads(), after_resolve, "the plan reads nothing again");
}
