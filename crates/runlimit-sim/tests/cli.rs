//! The `runlimit-sim` binary as an operator runs it.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

const POLICIES: &str = r#"
max_keys = 100000

[[policy]]
algorithm = "fixed_window"
id = "login.fixed"
scope = "ip"
limit = 60
window = { secs = 60, nanos = 0 }

[[policy]]
algorithm = "sliding_window"
id = "login.sliding"
scope = "ip"
limit = 60
window = { secs = 60, nanos = 0 }

[[policy]]
algorithm = "gcra"
id = "login.gcra"
scope = "ip"
quota = 60
period = { secs = 60, nanos = 0 }
burst_capacity = 20
"#;

/// A directory of this test's own, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn sim(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runlimit-sim"))
        .args(args)
        .current_dir(dir)
        .env(
            "RUNLIMIT_SIM_KEY_SECRET",
            "cli test secret of at least 32 bytes",
        )
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

#[test]
fn generate_then_replay_reports_the_burst_and_the_crawler() {
    let dir = scratch("generate_then_replay");
    std::fs::write(dir.join("policies.toml"), POLICIES).expect("writable");
    stdout(&sim(
        &[
            "generate",
            "--minutes",
            "20",
            "--users",
            "100",
            "-o",
            "access.log",
        ],
        &dir,
    ));

    let json = stdout(&sim(
        &[
            "replay",
            "-p",
            "policies.toml",
            "--json",
            "--chart",
            "chart.svg",
            "access.log",
        ],
        &dir,
    ));
    let report: serde_json::Value = serde_json::from_str(&json).expect("JSON report");
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3);
    for row in rows {
        // The 40 stuffing machines and the crawler are refused; steady
        // users, at one request per 20 s, are not.
        assert_eq!(row["subjects_denied"], 41, "{row}");
        assert!(row["denied"].as_u64().expect("a count") > 1_000, "{row}");
        assert_eq!(row["top_denied"].as_array().expect("a list").len(), 10);
    }
    assert_eq!(report["malformed"]["count"], 0);
    let chart = std::fs::read_to_string(dir.join("chart.svg")).expect("a chart");
    assert!(chart.starts_with("<svg") && chart.contains("login.gcra"));

    // The same secret gives the same report, labels included.
    let again = stdout(&sim(
        &["replay", "-p", "policies.toml", "--json", "access.log"],
        &dir,
    ));
    assert_eq!(json, again);

    let csv = stdout(&sim(
        &["replay", "-p", "policies.toml", "--csv", "access.log"],
        &dir,
    ));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("policy,algorithm,quota,requests,admitted,denied"));

    let table = stdout(&sim(&["replay", "-p", "policies.toml", "access.log"], &dir));
    assert!(table.contains("login.sliding") && table.contains("most denied"));
    assert!(
        !table.contains("203.0.113."),
        "keyed labels by default:\n{table}"
    );
    let raw = stdout(&sim(
        &[
            "replay",
            "-p",
            "policies.toml",
            "--raw-subjects",
            "--top",
            "50",
            "access.log",
        ],
        &dir,
    ));
    assert!(
        raw.contains("203.0.113.") && raw.contains("192.0.2.10"),
        "{raw}"
    );
}

#[test]
fn mistakes_are_refused_before_anything_is_replayed() {
    let dir = scratch("mistakes");
    std::fs::write(dir.join("policies.toml"), POLICIES).expect("writable");
    std::fs::write(
        dir.join("bad.toml"),
        POLICIES.replace("limit = 60", "limit = 0"),
    )
    .expect("writable");
    std::fs::write(dir.join("access.log"), "").expect("writable");
    for (args, says) in [
        (
            &["replay", "-p", "bad.toml", "access.log"][..],
            "bad.toml: invalid [[policy]] at line 4",
        ),
        (
            &["replay", "-p", "policies.toml", "--batch", "access.log"],
            "`login.fixed` is fixed_window but `login.sliding` is sliding_window; \
             batch only one algorithm's policies; replay without --batch",
        ),
        (
            &["replay", "-p", "policies.toml", "-s", "ip+", "access.log"],
            "empty",
        ),
        (
            &[
                "replay",
                "-p",
                "policies.toml",
                "-s",
                "referrer_name",
                "access.log",
            ],
            "no field",
        ),
        (
            &[
                "replay",
                "-p",
                "policies.toml",
                "--ipv4-prefix",
                "33",
                "access.log",
            ],
            "at most 32",
        ),
        (
            &[
                "replay",
                "-p",
                "policies.toml",
                "--charge-status",
                "4x",
                "access.log",
            ],
            "not a status",
        ),
        (
            &["replay", "-p", "policies.toml", "missing.log"],
            "missing.log",
        ),
    ] {
        let output = sim(args, &dir);
        assert!(!output.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

const BEFORE: &str = r#"
[[policy]]
algorithm = "fixed_window"
id = "login.ip"
scope = "ip"
limit = 5
window = { secs = 900, nanos = 0 }
"#;

const AFTER: &str = r#"
[[policy]]
algorithm = "gcra"
id = "login.ip"
scope = "ip"
quota = 3
period = { secs = 900, nanos = 0 }
burst_capacity = 3
"#;

/// One client's requests at these seconds after 2026-01-01T00:00:00Z.
fn clf_log(seconds: &[u32]) -> String {
    seconds
        .iter()
        .map(|second| {
            format!(
                "192.0.2.1 - - [01/Jan/2026:00:{:02}:{:02} +0000] \"POST /login HTTP/1.1\" 401 64\n",
                second / 60,
                second % 60
            )
        })
        .collect()
}

#[test]
fn a_change_of_policies_is_reported_beside_a_fresh_start_in_every_format() {
    // Five per 15 minutes, used up by 0 to 4; at 60 GCRA of three per 15
    // minutes carries the five: 60 and 61 are refused, where a fresh start
    // admits both.
    let dir = scratch("change");
    std::fs::write(dir.join("before.toml"), BEFORE).expect("writable");
    std::fs::write(dir.join("after.toml"), AFTER).expect("writable");
    std::fs::write(dir.join("access.log"), clf_log(&[0, 1, 2, 3, 4, 60, 61])).expect("writable");
    let change = [
        "replay",
        "-p",
        "before.toml",
        "--change-at",
        "+1m",
        "--then",
        "after.toml",
    ];
    let run = |extra: &[&str]| stdout(&sim(&[&change[..], extra, &["access.log"]].concat(), &dir));

    let table = run(&[]);
    assert!(
        table.contains(
            "policy change at 2026-01-01T00:01:00Z (+1m): 5 requests before it, 2 after\n\
             login.ip: fixed_window 5 per 15m → gcra 3 per 15m, burst 3\n"
        ),
        "{table}"
    );
    assert!(
        table.contains("a fresh start would have given away 2 requests to 1 subject"),
        "{table}"
    );

    let json: serde_json::Value = serde_json::from_str(&run(&["--json"])).expect("JSON");
    let row = &json["change"]["rows"][0];
    assert_eq!(row["given_away"]["requests"], 2, "{json}");
    assert_eq!(row["continuing"]["after_change"]["denied"], 2, "{json}");

    let csv = run(&["--csv"]);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert!(lines[0].ends_with(",given_away,given_away_subjects,held_back,held_back_subjects"));
    assert!(lines[1].ends_with(",2,1,0,0"), "{csv}");

    run(&["--chart", "chart.svg"]);
    let chart = std::fs::read_to_string(dir.join("chart.svg")).expect("a chart");
    assert!(chart.contains("policy change (+1m)"));
}

#[test]
fn change_mistakes_are_refused_naming_the_file_and_line() {
    let dir = scratch("change_mistakes");
    std::fs::write(dir.join("before.toml"), BEFORE).expect("writable");
    std::fs::write(dir.join("after.toml"), AFTER).expect("writable");
    // The scope is on the new file's fifth line, its table at the second.
    std::fs::write(
        dir.join("user.toml"),
        AFTER.replace("scope = \"ip\"", "scope = \"user\""),
    )
    .expect("writable");
    std::fs::write(
        dir.join("zero.toml"),
        AFTER.replace("quota = 3", "quota = 0"),
    )
    .expect("writable");
    std::fs::write(dir.join("broken.toml"), "[[policy]\n").expect("writable");
    std::fs::write(
        dir.join("mixed.toml"),
        format!("{AFTER}{}", BEFORE.replace("login.ip", "login.other")),
    )
    .expect("writable");
    std::fs::write(dir.join("access.log"), clf_log(&[60, 120])).expect("writable");
    let change = |at: &str, then: &str, log: &str| {
        sim(
            &[
                "replay",
                "-p",
                "before.toml",
                "--change-at",
                at,
                "--then",
                then,
                log,
            ],
            &dir,
        )
    };
    for (output, says) in [
        (
            sim(
                &[
                    "replay",
                    "-p",
                    "before.toml",
                    "--then",
                    "after.toml",
                    "access.log",
                ],
                &dir,
            ),
            "--change-at <TIME|+OFFSET>",
        ),
        (
            sim(
                &[
                    "replay",
                    "-p",
                    "before.toml",
                    "--change-at",
                    "+1m",
                    "access.log",
                ],
                &dir,
            ),
            "--then <FILE>",
        ),
        (
            change("soon", "after.toml", "access.log"),
            "`soon` is neither an RFC 3339 time",
        ),
        // Refused before the log is opened.
        (
            change("+1m", "user.toml", "missing.log"),
            "user.toml: invalid [[policy]] at line 2: `login.ip` has scope `user` but the \
             policy it replaces has scope `ip`: a policy can continue only from a policy with \
             the same id and scope",
        ),
        (
            change("+1m", "zero.toml", "missing.log"),
            "zero.toml: invalid [[policy]] at line 2: quota 0 is outside",
        ),
        (
            change("+1m", "broken.toml", "missing.log"),
            "broken.toml: invalid policy file: TOML parse error at line 1",
        ),
        (
            change("2026-01-01T00:00:30Z", "after.toml", "access.log"),
            "the change at 2026-01-01T00:00:30Z is before the log's first request, at \
             2026-01-01T00:01:00Z",
        ),
        (
            change("+2m", "after.toml", "access.log"),
            "the change at 2026-01-01T00:03:00Z is after the log's last request, at \
             2026-01-01T00:02:00Z",
        ),
        (
            sim(
                &[
                    "replay",
                    "--batch",
                    "-p",
                    "before.toml",
                    "--change-at",
                    "+1m",
                    "--then",
                    "mixed.toml",
                    "missing.log",
                ],
                &dir,
            ),
            "`login.ip` is gcra but `login.other` is fixed_window; batch only one \
             algorithm's policies; replay without --batch",
        ),
    ] {
        assert!(!output.status.success(), "{says}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{says}: {stderr}");
    }
    // Within the log, from its first request to its last, the change runs.
    for at in ["+0s", "2026-01-01T00:02:00Z"] {
        stdout(&change(at, "after.toml", "access.log"));
    }
}

#[test]
fn a_policy_error_names_the_file_and_its_own_table_line() {
    let dir = scratch("policy_line");
    let fourth = r#"
[[policy]]
algorithm = "gcra"
id = "login.gcra.strict"
scope = "ip"
quota = 0
period = { secs = 60, nanos = 0 }
burst_capacity = 5
"#;
    let text = format!("{POLICIES}{fourth}");
    let line = text
        .lines()
        .enumerate()
        .filter(|(_, line)| *line == "[[policy]]")
        .nth(3)
        .map(|(index, _)| index + 1)
        .expect("a fourth table");
    std::fs::write(dir.join("four.toml"), text).expect("writable");
    std::fs::write(dir.join("access.log"), "").expect("writable");
    let output = sim(&["replay", "-p", "four.toml", "access.log"], &dir);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("four.toml: invalid [[policy]] at line {line}:")),
        "{stderr}"
    );
}

#[test]
fn a_chart_that_cannot_be_written_names_its_path_after_the_report() {
    let dir = scratch("chart_path");
    std::fs::write(dir.join("policies.toml"), POLICIES).expect("writable");
    stdout(&sim(
        &[
            "generate",
            "--minutes",
            "2",
            "--users",
            "10",
            "-o",
            "access.log",
        ],
        &dir,
    ));
    let chart = dir.join("missing").join("dir").join("x.svg");
    let chart = chart.to_str().expect("a UTF-8 path");
    for (format, report_starts) in [
        (None, "policy "),
        (Some("--json"), "{"),
        (Some("--csv"), "policy,"),
    ] {
        let mut args = vec![
            "replay",
            "-p",
            "policies.toml",
            "--chart",
            chart,
            "access.log",
        ];
        args.extend(format);
        let output = sim(&args, &dir);
        assert!(!output.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(chart), "{args:?}: {stderr}");
        let printed = String::from_utf8_lossy(&output.stdout);
        assert!(
            printed.lines().any(|line| line.starts_with(report_starts))
                && printed.contains("login.gcra"),
            "{args:?} printed no report: {printed}"
        );
    }
}

#[test]
fn status_classes_are_case_insensitive() {
    let dir = scratch("status_case");
    std::fs::write(dir.join("policies.toml"), POLICIES).expect("writable");
    stdout(&sim(
        &[
            "generate",
            "--minutes",
            "2",
            "--users",
            "20",
            "-o",
            "access.log",
        ],
        &dir,
    ));
    let charged = |class: &str| {
        let json = stdout(&sim(
            &[
                "replay",
                "-p",
                "policies.toml",
                "--json",
                "--charge-status",
                class,
                "access.log",
            ],
            &dir,
        ));
        serde_json::from_str::<serde_json::Value>(&json).expect("JSON report")
    };
    let lower = charged("4xx");
    assert!(
        lower["uncharged"].as_u64().expect("a count") > 0,
        "the filter leaves some requests uncharged"
    );
    assert_eq!(charged("4XX"), lower);
    assert_eq!(charged("4Xx, 402-403"), lower);
}

#[test]
fn a_secret_file_keys_the_same_labels_with_or_without_its_trailing_newline() {
    let dir = scratch("secret_newline");
    std::fs::write(dir.join("policies.toml"), POLICIES).expect("writable");
    stdout(&sim(
        &[
            "generate",
            "--minutes",
            "20",
            "--users",
            "20",
            "-o",
            "access.log",
        ],
        &dir,
    ));
    let secret = "a label secret of at least thirty-two bytes";
    let labels = |file: &str, contents: &str| {
        std::fs::write(dir.join(file), contents).expect("writable");
        let json = stdout(&sim(
            &[
                "replay",
                "-p",
                "policies.toml",
                "--json",
                "--key-secret-file",
                file,
                "access.log",
            ],
            &dir,
        ));
        let report: serde_json::Value = serde_json::from_str(&json).expect("JSON report");
        let labels: Vec<String> = report["rows"][0]["top_denied"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|top| top["subject"].as_str().expect("a label").to_owned())
            .collect();
        assert!(!labels.is_empty(), "the log has denied subjects");
        labels
    };
    let bare = labels("bare", secret);
    assert_eq!(labels("lf", &format!("{secret}\n")), bare);
    assert_eq!(labels("crlf", &format!("{secret}\r\n")), bare);
    // The file is what keys the labels, and only one newline is trimmed.
    assert_ne!(labels("other", &format!("{secret}!")), bare);
    assert_ne!(labels("two", &format!("{secret}\n\n")), bare);
}

#[test]
fn more_malformed_lines_can_be_listed_than_the_first_ten() {
    let dir = scratch("malformed_lines");
    std::fs::write(dir.join("policies.toml"), POLICIES).expect("writable");
    // A good line, then 25 truncated ones (lines 2 to 26), then a good one.
    let good = r#"192.0.2.1 - - [01/Jan/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 10"#;
    let mut log = format!("{good}\n");
    for _ in 0..25 {
        log.push_str(&good[..30]);
        log.push('\n');
    }
    log.push_str(good);
    std::fs::write(dir.join("access.log"), log).expect("writable");
    let listed = |extra: &[&str]| {
        let mut args = vec!["replay", "-p", "policies.toml", "--json", "access.log"];
        args.extend(extra);
        let output = sim(&args, &dir);
        let report: serde_json::Value =
            serde_json::from_str(&stdout(&output)).expect("JSON report");
        assert_eq!(report["malformed"]["count"], 25);
        let lines: Vec<u64> = report["malformed"]["first"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|line| line["line"].as_u64().expect("a number"))
            .collect();
        (lines, String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (lines, stderr) = listed(&[]);
    assert_eq!(lines, (2..=11).collect::<Vec<_>>());
    assert!(
        stderr.contains("15 more malformed lines not listed; --malformed-lines"),
        "{stderr}"
    );
    let (lines, stderr) = listed(&["--malformed-lines", "all"]);
    assert_eq!(lines, (2..=26).collect::<Vec<_>>());
    assert!(!stderr.contains("not listed"), "{stderr}");
    assert_eq!(listed(&["--malformed-lines", "20"]).0.len(), 20);
    assert_eq!(listed(&["--malformed-lines", "0"]).0.len(), 0);

    let table = stdout(&sim(
        &[
            "replay",
            "-p",
            "policies.toml",
            "--malformed-lines",
            "3",
            "access.log",
        ],
        &dir,
    ));
    assert!(
        table.contains(
            "malformed lines skipped: 25 not in the log format; the first 3 of 25: \
             line 2 (not in the log format), line 3 (not in the log format), \
             line 4 (not in the log format)"
        ),
        "{table}"
    );
    let refused = sim(
        &[
            "replay",
            "-p",
            "policies.toml",
            "--malformed-lines",
            "some",
            "access.log",
        ],
        &dir,
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("neither a number of lines nor `all`")
    );
}

#[test]
fn a_log_with_no_usable_line_fails_and_says_why() {
    let dir = scratch("nothing_replayed");
    std::fs::write(dir.join("policies.toml"), POLICIES).expect("writable");
    let json = r#"{"time":"2026-01-01T00:00:00Z","client_ip":"192.0.2.1"}
{"time":"2026-01-01T00:00:01Z","client_ip":"192.0.2.1"}

{"time":"2026-01-01T00:00:02Z","client_ip":"192.0.2.1"}
"#;
    std::fs::write(dir.join("access.jsonl"), json).expect("writable");
    std::fs::write(
        dir.join("truncated.log"),
        "192.0.2.1 - - [01/Jan\n192.0.2.1 -\n",
    )
    .expect("writable");
    std::fs::write(dir.join("blank.log"), "\n\n").expect("writable");
    for (args, says) in [
        (
            &["-f", "json", "access.jsonl"][..],
            "the log's 3 lines are all malformed: 3 no client address (field `ip`)\n  \
             --subject ip:FIELD names the field holding the client address",
        ),
        (
            &["truncated.log"],
            "the log's 2 lines are all malformed: 2 not in the log format",
        ),
        (&["blank.log"], "nothing to replay: the log has no lines"),
    ] {
        let output = sim(&[&["replay", "-p", "policies.toml"], args].concat(), &dir);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(output.stdout.is_empty(), "{args:?} printed a report");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // Named as --help says, the same log replays.
    let table = stdout(&sim(
        &[
            "replay",
            "-p",
            "policies.toml",
            "-f",
            "json",
            "--subject",
            "ip:client_ip",
            "access.jsonl",
        ],
        &dir,
    ));
    assert!(table.starts_with("3 requests from 1 subject, "), "{table}");

    let help = stdout(&sim(&["replay", "--help"], &dir));
    for documented in [
        "the field `ip` in JSON and CSV",
        "`ip:FIELD`",
        "--malformed-lines <N|all>",
        "the policies must share one",
        "the report is still printed",
        "trailing newline",
        "classes in either case",
        "an offset from the log's first",
        "what a reset would have given away",
    ] {
        assert!(
            help.contains(documented),
            "--help lacks {documented:?}:\n{help}"
        );
    }
}

/// Runs the commands of `readme`'s `sh` blocks that start with `prefix`, as
/// written, in `dir`, and checks each `text` block against the start of the
/// output of the command before it, up to an elision (`…`) or the labels of
/// the most denied (keyed by each run's own secret). Returns the commands
/// run and the blocks checked.
fn run_documented(readme: &str, prefix: &str, dir: &Path) -> (Vec<String>, usize) {
    let (mut commands, mut checked) = (Vec::new(), 0);
    let mut output = String::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let block: Vec<&str> = match line {
            "```sh" | "```text" => lines.by_ref().take_while(|l| *l != "```").collect(),
            _ => continue,
        };
        if line == "```sh" {
            for command in block.iter().filter_map(|l| l.strip_prefix(prefix)) {
                let args: Vec<&str> = command.split_whitespace().collect();
                output = stdout(&sim(&args, dir));
                commands.push(command.to_owned());
            }
        } else {
            let mut shown: Vec<&str> = block
                .iter()
                .copied()
                .take_while(|l| *l != "…" && !l.starts_with("most denied"))
                .collect();
            while shown.last() == Some(&"") {
                shown.pop();
            }
            let printed: Vec<&str> = output.lines().take(shown.len()).collect();
            assert_eq!(printed, shown, "the README shows other output");
            checked += 1;
        }
    }
    (commands, checked)
}

fn copy_policies(to: &Path) {
    std::fs::create_dir_all(to).expect("a policies directory");
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    for entry in std::fs::read_dir(from).expect("the policy files") {
        let path = entry.expect("an entry").path();
        std::fs::copy(&path, to.join(path.file_name().expect("a file name"))).expect("copied");
    }
}

#[test]
fn the_readme_commands_run_as_written_and_print_what_it_shows() {
    let dir = scratch("readme");
    copy_policies(&dir.join("crates/runlimit-sim/policies"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(root).expect("the README");
    let section = readme
        .split("\n## ")
        .find(|section| section.starts_with("Knowing what a policy will do"))
        .expect("the simulator's section");
    let (commands, checked) =
        run_documented(section, "cargo run --release -p runlimit-sim -- ", &dir);
    assert!(commands.len() >= 4 && checked >= 3, "{commands:?}");
    assert!(
        commands.iter().any(|c| c.starts_with("replay --batch")),
        "{commands:?}"
    );
    assert!(
        commands.iter().any(|c| c.contains("--change-at")),
        "{commands:?}"
    );

    let dir = scratch("crate_readme");
    copy_policies(&dir.join("policies"));
    let readme = include_str!("../README.md");
    let (commands, _) = run_documented(readme, "runlimit-sim ", &dir);
    for option in ["--batch", "--change-at"] {
        assert!(
            commands.iter().any(|c| c.contains(option)),
            "{option}: {commands:?}"
        );
    }
}
