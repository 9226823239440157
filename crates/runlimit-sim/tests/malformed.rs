//! Malformed input is counted with its line numbers and skipped; it never
//! stops a run and never panics.

use proptest::prelude::*;
use runlimit_core::KeyHasher;
use runlimit_sim::{
    Format, InputSpec, Malformed, NothingReplayed, PolicySet, Reader, Replay, ReplayOptions,
    SubjectSpec,
};

const POLICY: &str = r#"
    [[policy]]
    algorithm = "fixed_window"
    id = "one"
    scope = "ip"
    limit = 100
    window = { secs = 60, nanos = 0 }
"#;

fn run(log: &[u8], spec: &InputSpec) -> Replay {
    let set = PolicySet::from_toml(POLICY).expect("valid policies");
    let hasher = KeyHasher::new(b"malformed tests secret, 32 bytes+").expect("a long secret");
    let mut replay = Replay::new(&set, ReplayOptions::new(hasher)).expect("a valid simulation");
    let mut reader = Reader::new(log, spec).expect("a readable log");
    replay
        .run(&mut reader, |_| {})
        .expect("malformed lines do not stop a run");
    replay
}

fn replay(log: &[u8], spec: &InputSpec) -> runlimit_sim::Report {
    run(log, spec).report()
}

fn nothing_replayed(log: &[u8], spec: &InputSpec) -> NothingReplayed {
    run(log, spec)
        .require_requests(spec)
        .expect_err("no line can be replayed")
}

const GOOD: &str = r#"192.0.2.1 - - [01/Jan/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 10 "-" "ua""#;

#[test]
fn clf_lines_that_cannot_be_used_are_counted_by_number_and_reason() {
    let mut log = Vec::new();
    let mut push = |line: &[u8]| {
        log.extend_from_slice(line);
        log.push(b'\n');
    };
    push(GOOD.as_bytes()); // 1
    push(&GOOD.as_bytes()[..40]); // 2: truncated inside the request
    push(GOOD.replace("01/Jan/2026", "01/Jam/2026").as_bytes()); // 3: bad date
    push(GOOD.replace("192.0.2.1", "192.0.2.\u{fffd}").as_bytes()); // 4: not an address
    let mut invalid_utf8 = GOOD.replace("192.0.2.1", "192.0.2.X").into_bytes();
    invalid_utf8[8] = 0xff; // 5: invalid UTF-8 in the host
    push(&invalid_utf8);
    let mut agent = GOOD.replace("\"ua\"", "\"ua \u{1}\"").into_bytes();
    let at = agent.len() - 3;
    agent[at] = 0xfe; // 6: invalid UTF-8 in the user agent is just bytes
    push(&agent);
    push(format!("{GOOD}{}", "x".repeat(100_000)).as_bytes()); // 7: huge
    push(b"-"); // 8: a lone dash
    push(GOOD.as_bytes()); // 9

    let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());
    let report = replay(&log, &spec);
    assert_eq!(report.requests, 3, "lines 1, 6 and 9");
    assert_eq!(report.malformed.count, 6);
    assert_eq!(report.lines, 9);
    let numbered: Vec<(u64, String)> = report
        .malformed
        .first
        .iter()
        .map(|line| (line.line, line.reason.clone()))
        .collect();
    assert_eq!(
        numbered,
        [
            (2, Malformed::Syntax.to_string()),
            (3, Malformed::BadTime.to_string()),
            (4, Malformed::BadAddress.to_string()),
            (5, Malformed::BadAddress.to_string()),
            (7, Malformed::TooLong.to_string()),
            (8, Malformed::Syntax.to_string()),
        ]
    );
    assert_eq!(
        report.malformed.by_reason.get("unreadable client address"),
        Some(&2)
    );
    // The report names lines, never their content.
    let json = serde_json::to_string(&report).expect("serializes");
    assert!(!json.contains("192.0.2"), "{json}");
}

#[test]
fn blank_lines_are_skipped_in_every_format_and_keep_their_numbers() {
    // Line 2 is a request, line 5 is malformed, lines 1, 3, 4 and 6 blank.
    let around = |request: &str, bad: &str| format!("\n{request}\n\r\n \t\n{bad}\n\n");
    let json = around(
        r#"{"time":"2026-01-01T00:00:00Z","ip":"192.0.2.1"}"#,
        r#"{"time":"2026-01-01T00:00:01Z"}"#,
    );
    let csv = format!(
        "time,ip\n{}",
        around("2026-01-01T00:00:00Z,192.0.2.1", "2026-01-01T00:00:01Z")
    );
    let clf = around(GOOD, &GOOD[..40]);
    for (format, log, bad_line) in [
        (Format::Json, json, 5),
        (Format::Csv, csv, 6),
        (Format::Clf, clf, 5),
    ] {
        let report = replay(
            log.as_bytes(),
            &InputSpec::new(format, SubjectSpec::client_address()),
        );
        assert_eq!(
            (report.requests, report.malformed.count, report.lines),
            (1, 1, 2),
            "{format:?}"
        );
        assert_eq!(report.malformed.first[0].line, bad_line, "{format:?}");
    }
}

#[test]
fn json_and_csv_skip_what_they_cannot_read() {
    let json = b"{\"time\":\"2026-01-01T00:00:00Z\",\"ip\":\"192.0.2.1\"}\n\
                 {\"time\":\"2026-01-01T00:00:01Z\",\"ip\":\"192.0.2.1\"\n\
                 [1,2,3]\n\
                 {\"time\":\"not a time\",\"ip\":\"192.0.2.1\"}\n\
                 {\"time\":\"2026-01-01T00:00:02Z\"}\n\
                 {\"time\":\"2026-01-01T00:00:03Z\",\"ip\":\"\xff\"}\n";
    let report = replay(
        json,
        &InputSpec::new(Format::Json, SubjectSpec::client_address()),
    );
    assert_eq!(report.requests, 1);
    let reasons: Vec<String> = report
        .malformed
        .first
        .iter()
        .map(|l| l.reason.clone())
        .collect();
    assert_eq!(
        reasons,
        [
            "not in the log format",
            "not in the log format",
            "unreadable time",
            "no client address",
            "not in the log format"
        ]
    );

    let csv = b"time,ip\n2026-01-01T00:00:00Z,192.0.2.1\n2026-01-01T00:00:01Z\n\"unterminated,192.0.2.1\n";
    let report = replay(
        csv,
        &InputSpec::new(Format::Csv, SubjectSpec::client_address()),
    );
    assert_eq!(report.requests, 1);
    assert_eq!(report.malformed.first[0].line, 3);

    // A stray quote stays on its own line (read as far as it goes) instead
    // of swallowing the rest of the log into one record.
    let mut csv = b"time,ip\n2026-01-01T00:00:00Z,\"192.0.2.1\n".to_vec();
    for second in 1..=20 {
        csv.extend_from_slice(format!("2026-01-01T00:00:{second:02}Z,192.0.2.1\n").as_bytes());
    }
    let report = replay(
        &csv,
        &InputSpec::new(Format::Csv, SubjectSpec::client_address()),
    );
    assert_eq!((report.requests, report.malformed.count), (21, 0));

    // A cost field named but absent is a malformed line, not a free request.
    let json = b"{\"time\":\"2026-01-01T00:00:00Z\",\"ip\":\"192.0.2.1\",\"units\":2}\n\
                 {\"time\":\"2026-01-01T00:00:01Z\",\"ip\":\"192.0.2.1\"}\n";
    let mut spec = InputSpec::new(Format::Json, SubjectSpec::client_address());
    spec.cost_field = Some("units".to_owned());
    let report = replay(json, &spec);
    assert_eq!((report.requests, report.uncharged), (1, 0));
    assert_eq!(report.malformed.first[0].reason, "no valid cost");
}

#[test]
fn a_log_with_no_usable_line_says_which_fields_its_lines_lack() {
    let json = InputSpec::new(Format::Json, SubjectSpec::client_address());
    let lacking_ip = b"{\"time\":\"2026-01-01T00:00:00Z\",\"client\":\"192.0.2.1\"}\n\
                       {\"time\":\"2026-01-01T00:00:01Z\",\"client\":\"192.0.2.1\"}\n\
                       \n\
                       {\"time\":\"yesterday\",\"ip\":\"192.0.2.1\"}\n";
    let nothing = nothing_replayed(lacking_ip, &json);
    assert_eq!(nothing.lines(), 3, "the blank line is not counted");
    assert_eq!(
        nothing.reasons().collect::<Vec<_>>(),
        [(Malformed::MissingAddress, 2), (Malformed::BadTime, 1)]
    );
    assert_eq!(
        nothing.to_string(),
        "nothing to replay: the log's 3 lines are all malformed: \
         2 no client address (field `ip`), 1 unreadable time (field `time`)"
    );

    // The fields named are the run's own.
    let mut named: InputSpec = json.clone();
    named.subject = "ip:client+user".parse().expect("a subject");
    named.time_field = Some("ts".to_owned());
    let nothing = nothing_replayed(b"{\"ts\":1767225600,\"client\":\"192.0.2.1\"}", &named);
    assert_eq!(
        nothing.to_string(),
        "nothing to replay: the log's one line is malformed: 1 no subject field (field `user`)"
    );
    assert_eq!(named.fields_of(Malformed::MissingAddress), ["client"]);
    assert_eq!(named.fields_of(Malformed::BadTime), ["ts"]);
    assert!(named.fields_of(Malformed::Syntax).is_empty());

    let clf = InputSpec::new(Format::Clf, SubjectSpec::client_address());
    let nothing = nothing_replayed(b"\n  \n", &clf);
    assert_eq!((nothing.lines(), nothing.reasons().count()), (0, 0));
    assert!(nothing.to_string().contains("no lines"), "{nothing}");
    let nothing = nothing_replayed(&GOOD.as_bytes()[..30], &clf);
    assert_eq!(
        nothing.reasons().collect::<Vec<_>>(),
        [(Malformed::Syntax, 1)]
    );

    // One usable line is enough.
    run(GOOD.as_bytes(), &clf)
        .require_requests(&clf)
        .expect("a request was replayed");
}

fn any_line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Arbitrary bytes.
        proptest::collection::vec(any::<u8>(), 0..200),
        // A real line, cut and spliced with junk.
        (0..GOOD.len(), proptest::collection::vec(any::<u8>(), 0..20)).prop_map(|(cut, junk)| {
            let mut line = GOOD.as_bytes()[..cut].to_vec();
            line.extend(junk);
            line
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_input_panics_or_stops_a_run(lines in proptest::collection::vec(any_line(), 0..20)) {
        let log: Vec<u8> = lines.join(&b'\n');
        // A line ends at a newline or at the end of a log that does not end
        // with one; blank lines (spaces and tabs at most) are skipped.
        let mut segments: Vec<&[u8]> = log.split(|&b| b == b'\n').collect();
        if log.last().is_none_or(|&b| b == b'\n') {
            segments.pop();
        }
        let line_count = segments
            .iter()
            .filter(|line| {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                !line.iter().all(|&b| b == b' ' || b == b'\t')
            })
            .count() as u64;
        for format in [Format::Clf, Format::Json] {
            let report = replay(&log, &InputSpec::new(format, SubjectSpec::client_address()));
            prop_assert_eq!(report.requests + report.malformed.count, line_count);
        }
        let mut csv = b"time,ip\n".to_vec();
        csv.extend_from_slice(&log);
        let report = replay(&csv, &InputSpec::new(Format::Csv, SubjectSpec::client_address()));
        prop_assert_eq!(report.requests + report.malformed.count, line_count);
    }
}
