//! `--html FILE` in a real browser: a page written from a real target's trace, whose Python function that leaks
//! is named as markup (`<img src=x onerror=...>`, a file name with quotes), opened in headless Chromium through
//! chromedriver: the findings and the Python line render as text, nothing of the target runs, the timeline is
//! drawn, a click on a flame graph frame zooms to it, and the console has no error; `report REC --html` writes
//! the same page from the recording. The screenshot is kept in Cargo's test tmp dir (html-report.png).

use crate::common::*;
use crate::webdriver::Browser;
use serde_json::Value;
use std::process::Command;

const HOSTILE: &str = "<img src=x onerror=window.__pwned=1>";

/// The page's state as the test reads it: the rendered text, what ran, what was drawn.
const STATE: &str = r#"
const svg = document.querySelector('#flame svg');
return {
  ready: document.body.dataset.ready,
  errors: window.syscatchErrors,
  pwned: window.__pwned === 1,
  imgs: document.querySelectorAll('img').length,
  bold: document.querySelectorAll('b').length,
  findings: document.getElementById('findings').innerText,
  finding_frames: Array.from(document.querySelectorAll('.finding li')).map(li => li.textContent),
  stacks_rows: document.querySelectorAll('#stacks tbody tr.row').length,
  regions_rows: document.querySelectorAll('#regions tbody tr.row').length,
  canvas: document.querySelectorAll('#timeline canvas').length,
  legend: document.getElementById('timeline').innerText,
  classes: document.querySelectorAll('#classes tbody tr').length,
  frames: document.querySelectorAll('#flame g.frame').length,
  svg_width: svg ? svg.getBoundingClientRect().width : 0,
};
"#;

/// Calls back with the widest frame of the flame graph that is narrower than the chart (marked for the click),
/// once the frames' widths have settled (d3 animates them: unchanged over 10 animation frames), or null after 20 s.
const PICK: &str = r#"
const done = arguments[0];
const start = performance.now();
let last = null, same = 0;
(function check() {
  const full = document.querySelector('#flame svg').getBoundingClientRect().width;
  let best = null;
  for (const g of document.querySelectorAll('#flame g.frame')) {
    const w = g.querySelector('rect').getBoundingClientRect().width;
    if (w > 8 && w < full * 0.9 && (!best || w > best.w)) best = { g, w };
  }
  same = best && last && best.g === last.g && best.w === last.w ? same + 1 : 0;
  last = best;
  if (same >= 10) {
    best.g.querySelector('rect').id = 'clicked-frame';
    done({ name: best.g.getAttribute('name'), width: best.w, full });
  } else if (performance.now() - start > 20000) done(null);
  else requestAnimationFrame(check);
})();
"#;

/// Calls back once the clicked frame spans the chart (the zoom's transition done), or with its width after 20 s.
const ZOOMED: &str = r#"
const done = arguments[0];
const rect = document.getElementById('clicked-frame');
const full = document.querySelector('#flame svg').getBoundingClientRect().width;
const start = performance.now();
(function check() {
  const w = rect.getBoundingClientRect().width;
  if (w > full * 0.98 || performance.now() - start > 20000) done({ width: w, full });
  else requestAnimationFrame(check);
})();
"#;

/// The data block of a page, parsed.
fn page_data(html: &str) -> Value {
    let open = r#"<script type="application/json" id="report-data">"#;
    let start = html.find(open).expect("a data block") + open.len();
    let end = start + html[start..].find("</script>").expect("the block ends");
    serde_json::from_str(&html[start..end]).expect("the data block is JSON")
}

#[test]
fn html_report_renders_the_findings_and_zooms_in_a_browser() {
    require_ptrace();
    let (Some(chromium), Some(driver)) = (
        optional_tool("chromium", "the HTML report's browser test (Debian package chromium)"),
        optional_tool("chromedriver", "the HTML report's browser test (Debian package chromium-driver)"),
    ) else {
        return;
    };
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (page, rec, offline) = (dir.join("html-report.html"), dir.join("html.rec"), dir.join("html-offline.html"));
    let lib = shared_lib("ucx_like_lib");
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("testprogs/hostile_names.py")).arg(&lib);
    cmd.env("UCXLIKE_HOOK", "inline").env_remove("PYTHONMALLOC");
    let mut t = Target::start_cmd(&mut cmd);
    let pid = t.pid.to_string();
    let (page_s, rec_s) = (page.to_str().unwrap(), rec.to_str().unwrap());
    let mut sc = Syscatch::start(&["--pid", &pid, "--smaps-every", "200ms", "--html", page_s, "--record", rec_s]);
    sc.wait_attached();
    t.send("wait 300");
    assert_eq!(t.out.next(), "waited");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    // --html implies --leaks: the text report is on stdout as well.
    assert!(out.iter().any(|l| l.starts_with("Findings (")), "{out:#?}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains(HOSTILE), "the hostile name is in the page as markup");
    assert!(html.len() < 1536 << 10, "{} bytes", html.len());
    // The same page from the recording, offline: the same findings and stacks.
    let (code, report, err) = run_syscatch(&["report", rec_s, "--html", offline.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(report.contains("ucx-rcache-invalidation"), "{report}");
    let (live, replayed) = (page_data(&html), page_data(&std::fs::read_to_string(&offline).unwrap()));
    assert_eq!(live["schema"], 1);
    assert_eq!(live["findings"]["findings"][0]["where"], replayed["findings"]["findings"][0]["where"]);
    let callers = |d: &Value| d["stacks"].as_array().unwrap().iter().map(|s| s["caller"].clone()).collect::<Vec<_>>();
    assert_eq!(callers(&live), callers(&replayed));
    let (code, _, err) = run_syscatch(&["report", rec_s, "--diff", rec_s, "--html", offline.to_str().unwrap()]);
    assert_eq!((code, err.trim()), (2, "syscatch: --html writes one recording's report: leave out --diff"));

    let profile = dir.join("html-chromium-profile");
    let browser = Browser::start(&chromium, &driver, &profile);
    browser.open(&format!("file://{}", page.display()));
    let state = browser.eval(STATE);
    assert_eq!(state["ready"], "yes", "{state:#}");
    assert_eq!(state["errors"], Value::Array(Vec::new()), "{state:#}");
    // Nothing of the target became markup or ran.
    assert_eq!(
        (state["pwned"].as_bool(), state["imgs"].as_u64(), state["bold"].as_u64()),
        (Some(false), Some(0), Some(0))
    );
    // The findings as in the text report, with the Python line: the hostile qualname, as text.
    let findings = state["findings"].as_str().unwrap();
    assert!(findings.contains("ucx-rcache-invalidation") && findings.contains("fix 1"), "{findings}");
    assert!(findings.contains("Heap (glibc") && findings.contains("main arena ([heap])"), "{findings}");
    let frames: Vec<&str> = state["finding_frames"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let python = frames.iter().find(|f| f.ends_with("[python]")).unwrap_or_else(|| panic!("{frames:#?}"));
    assert!(python.starts_with(HOSTILE) && python.contains("/tmp/\"quoted' <b>bold</b>.py:"), "{python}");
    assert!(state["stacks_rows"].as_u64().unwrap() >= 1 && state["regions_rows"].as_u64().unwrap() >= 1, "{state:#}");
    // The timeline is drawn (uPlot: a canvas), its legend naming the series.
    assert!(state["canvas"].as_u64().unwrap() >= 1, "{state:#}");
    assert!(state["legend"].as_str().unwrap().contains("Rss+Swap"), "{state:#}");
    // The memory classes, measured at the start and the end, beside it.
    assert!(state["classes"].as_u64().unwrap() >= 3, "{state:#}");

    // The weight switch: still-mapped bytes, where the pool's stacks part.
    browser.eval(
        "const s = document.getElementById('weight'); s.value = 'still-mapped'; s.dispatchEvent(new Event('change'));",
    );
    assert!(browser.eval(STATE)["frames"].as_u64().unwrap() > 3);
    let picked = browser.eval_async(PICK);
    assert!(picked.is_object(), "no frame narrower than the chart to click: {:#}", browser.eval(STATE));
    browser.click("#clicked-frame");
    let zoomed = browser.eval_async(ZOOMED);
    let (w, full) = (zoomed["width"].as_f64().unwrap(), zoomed["full"].as_f64().unwrap());
    assert!(w > full * 0.98, "the frame {picked} did not zoom to the chart's width: {zoomed}");
    // Search highlights the frames whose name matches (a Python function's, by its name).
    let found = browser.eval(
        "const i = document.getElementById('search'); i.value = 'KEEP (hostile'; i.dispatchEvent(new Event('input')); \
         return Array.from(document.querySelectorAll('#flame g.frame')).filter(g => \
           g.querySelector('rect').getAttribute('fill') === '#e600e6').map(g => g.getAttribute('name'));",
    );
    let found: Vec<&str> = found.as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(found.len() == 1 && found[0].starts_with("keep (hostile_names.py:"), "{found:?}");
    // A row opens its full stack.
    browser.click("#stacks tbody tr.row");
    let shown = browser.eval("return document.querySelector('#stacks tbody tr.detail:not([hidden])').innerText");
    assert!(shown.as_str().is_some_and(|s| s.contains("hostile_names.py:")), "{shown}");

    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    std::fs::write(dir.join("html-report.png"), &png).unwrap();
    let console = browser.console();
    let severe: Vec<_> = console.iter().filter(|(level, _)| level == "SEVERE").collect();
    assert!(severe.is_empty(), "console errors: {severe:#?}");
    t.send("quit");
    assert_eq!(t.wait().code(), Some(0));
}

/// A session's page: one report per process, chosen with a selector; the address's `#pid-N` shows that process's.
#[test]
fn a_session_page_shows_each_process_report_on_choice() {
    require_ptrace();
    let (Some(chromium), Some(driver)) = (
        optional_tool("chromium", "the HTML report's browser test (Debian package chromium)"),
        optional_tool("chromedriver", "the HTML report's browser test (Debian package chromium-driver)"),
    ) else {
        return;
    };
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let page = dir.join("html-session.html");
    let prog = testprog("target");
    let (mut a, mut b) = (Target::start(&prog, &[]), Target::start(&prog, &[]));
    let list = format!("{},{}", a.pid, b.pid);
    let mut sc = Syscatch::start(&["--pid", &list, "--smaps-every", "100ms", "--html", page.to_str().unwrap()]);
    sc.wait_attached();
    sc.wait_attached();
    for (t, n) in [(&mut a, "mmap 2"), (&mut b, "mmap 3")] {
        t.send(n);
        t.out.until(|l| l == "ok");
    }
    sc.signal(libc::SIGINT);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    let data = page_data(&std::fs::read_to_string(&page).unwrap());
    let pids: Vec<i64> = data["processes"].as_array().unwrap().iter().map(|p| p["pid"].as_i64().unwrap()).collect();
    let mut sorted = pids.clone();
    sorted.sort();
    assert_eq!(sorted, [i64::from(a.pid.min(b.pid)), i64::from(a.pid.max(b.pid))], "{data:#}");

    let profile = dir.join("html-session-profile");
    let browser = Browser::start(&chromium, &driver, &profile);
    let shown = |pid: Option<i64>| {
        browser.open("about:blank");
        let hash = pid.map(|p| format!("#pid-{p}")).unwrap_or_default();
        browser.open(&format!("file://{}{hash}", page.display()));
        let state = browser.eval(STATE);
        assert_eq!((state["ready"].as_str(), &state["errors"]), (Some("yes"), &Value::Array(Vec::new())), "{state:#}");
        let title = browser.eval("return document.getElementById('title').textContent");
        let options = browser.eval("return document.querySelectorAll('#process option').length");
        assert_eq!(options, 2, "{state:#}");
        title.as_str().unwrap().to_string()
    };
    // The first of the table by default; another by its pid.
    assert!(shown(None).contains(&format!("process {} (", pids[0])));
    assert!(shown(Some(pids[1])).contains(&format!("process {} (", pids[1])));
    for mut t in [a, b] {
        t.send("exit 0");
        assert_eq!(t.wait().code(), Some(0));
    }
}
