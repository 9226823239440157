//! A change of policies replayed: small logs with the decisions of the
//! policies continuing across the change, and of a fresh start at it,
//! computed by hand from the algorithms' rules and the carry's
//! (`runlimit_core::carry`).

use runlimit_core::KeyHasher;
use runlimit_sim::{
    ChangeAt, ChangeError, ChangeOutsideLog, ChangeReport, Counts, Format, InputSpec, Mode,
    PolicyChange, PolicySet, Reader, Replay, ReplayError, ReplayOptions, Report, SimulationError,
    SubjectSpec,
};

const SECRET: &[u8] = b"change tests secret of 32 bytes or more";

/// A CLF line from `host` at `second` seconds after 2026-01-01T00:00:00Z.
fn line(host: &str, second: u32) -> String {
    format!(
        "{host} - - [01/Jan/2026:{:02}:{:02}:{:02} +0000] \"POST /login HTTP/1.1\" 401 64\n",
        second / 3_600,
        second / 60 % 60,
        second % 60
    )
}

fn log(requests: &[(&str, u32)]) -> String {
    requests.iter().map(|&(host, at)| line(host, at)).collect()
}

/// `[[policy]]` tables: a fixed window of `limit` per 15 minutes, each
/// `(id, limit)`.
fn fixed_windows(policies: &[(&str, u64)]) -> String {
    policies
        .iter()
        .map(|(id, limit)| {
            format!(
                "[[policy]]\nalgorithm = \"fixed_window\"\nid = \"{id}\"\nscope = \"ip\"\n\
                 limit = {limit}\nwindow = {{ secs = 900, nanos = 0 }}\n\n"
            )
        })
        .collect()
}

fn change(before: &str, at: &str, after: &str) -> PolicyChange {
    PolicyChange::new(
        PolicySet::from_toml(before).expect("valid old policies"),
        at.parse().expect("a change time"),
        PolicySet::from_toml(after).expect("valid new policies"),
    )
    .expect("a valid change")
}

/// What a replay of `log` across `change` decided: the report, and per
/// request each row's continuing and fresh start admissions.
struct Replayed {
    report: Report,
    continuing: Vec<Vec<bool>>,
    fresh_start: Vec<Vec<bool>>,
}

impl Replayed {
    fn change(&self) -> &ChangeReport {
        self.report.change.as_ref().expect("a change report")
    }

    /// Row `row`'s admissions, one per request.
    fn column(&self, row: usize) -> (Vec<bool>, Vec<bool>) {
        let pick = |decided: &Vec<Vec<bool>>| decided.iter().map(|r| r[row]).collect();
        (pick(&self.continuing), pick(&self.fresh_start))
    }
}

fn replay(change: &PolicyChange, mode: Mode, log: &str) -> Replayed {
    let mut options = ReplayOptions::new(KeyHasher::new(SECRET).expect("a long secret"));
    options.mode = mode;
    options.raw_subjects = true;
    let mut replay = Replay::with_change(change, options).expect("a valid simulation");
    let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());
    let mut reader = Reader::new(log.as_bytes(), &spec).expect("a readable log");
    let (mut continuing, mut fresh_start) = (Vec::new(), Vec::new());
    while let Some((_, request)) = reader.next_request().expect("reading a string") {
        let request = request.expect("a well-formed line");
        let admitted = |verdicts: &[runlimit_sim::Verdict]| {
            verdicts.iter().map(|v| v.is_admitted()).collect::<Vec<_>>()
        };
        continuing.push(admitted(replay.record(request).expect("the store works")));
        fresh_start.push(admitted(replay.fresh_start_verdicts()));
    }
    replay
        .require_change()
        .expect("the change falls within the log");
    Replayed {
        report: replay.report(),
        continuing,
        fresh_start,
    }
}

/// Admitted and denied.
fn pair(counts: Counts) -> (u64, u64) {
    (counts.admitted, counts.denied)
}

#[test]
fn lowering_a_limit_keeps_a_subject_at_it_denied_where_a_fresh_start_admits() {
    // Five per 15 minutes, anchored at 0: 0 to 4 are admitted, 5 refused.
    // At 60 the limit drops to three. Continuing keeps the window (the same
    // length keeps its anchor and count): five used of three, so 60 to 63
    // are refused until the window ends at 900, where a new one admits. A
    // fresh start anchors a new window at 60: 60, 61 and 62 are admitted, 63
    // is refused, and so is 900, inside the window [60, 960).
    let change = change(
        &fixed_windows(&[("login.ip", 5)]),
        "+60s",
        &fixed_windows(&[("login.ip", 3)]),
    );
    let a = "192.0.2.1";
    let replayed = replay(
        &change,
        Mode::Independent,
        &log(&[
            (a, 0),
            (a, 1),
            (a, 2),
            (a, 3),
            (a, 4),
            (a, 5),
            (a, 60),
            (a, 61),
            (a, 62),
            (a, 63),
            (a, 900),
        ]),
    );
    let before = [true, true, true, true, true, false];
    let (continuing, fresh_start) = replayed.column(0);
    assert_eq!(continuing[..6], before);
    assert_eq!(fresh_start[..6], before);
    assert_eq!(continuing[6..], [false, false, false, false, true]);
    assert_eq!(fresh_start[6..], [true, true, true, false, false]);

    let summary = replayed.change();
    assert_eq!(summary.at, "2026-01-01T00:01:00Z");
    assert_eq!(summary.since_first_request, "+1m");
    assert_eq!((summary.requests_before, summary.requests_after), (6, 5));
    let row = &summary.rows[0];
    assert_eq!(row.from_quota.as_deref(), Some("5 per 15m"));
    assert_eq!(row.quota, "3 per 15m");
    assert_eq!(pair(row.before_change), (5, 1));
    assert_eq!(pair(row.continuing.after_change), (1, 4));
    assert_eq!(pair(row.continuing.overall), (6, 5));
    assert_eq!(pair(row.fresh_start.after_change), (3, 2));
    assert_eq!(pair(row.fresh_start.overall), (8, 3));
    assert_eq!((row.given_away.requests, row.given_away.subjects), (3, 1));
    assert_eq!((row.held_back.requests, row.held_back.subjects), (1, 1));
    // The report's row is the continuing run, over the whole log.
    let overall = &replayed.report.rows[0];
    assert_eq!((overall.admitted, overall.denied), (6, 5));
}

#[test]
fn raising_a_limit_gives_a_subject_at_it_the_difference_at_once() {
    // Three per 15 minutes: 0 to 2 admitted, 3 refused. At 60 the limit is
    // five: continuing, two more (60, 61); a fresh start admits all four.
    let change = change(
        &fixed_windows(&[("login.ip", 3)]),
        "2026-01-01T00:01:00Z",
        &fixed_windows(&[("login.ip", 5)]),
    );
    let a = "192.0.2.1";
    let replayed = replay(
        &change,
        Mode::Independent,
        &log(&[
            (a, 0),
            (a, 1),
            (a, 2),
            (a, 3),
            (a, 60),
            (a, 61),
            (a, 62),
            (a, 63),
        ]),
    );
    let (continuing, fresh_start) = replayed.column(0);
    assert_eq!(continuing[4..], [true, true, false, false]);
    assert_eq!(fresh_start[4..], [true, true, true, true]);
    let row = &replayed.change().rows[0];
    assert_eq!(pair(row.before_change), (3, 1));
    assert_eq!(pair(row.continuing.after_change), (2, 2));
    assert_eq!(pair(row.fresh_start.after_change), (4, 0));
    assert_eq!(row.given_away.requests, 2);
    assert_eq!(row.held_back.requests, 0);
}

const GCRA_THREE_PER_15M: &str = r#"
[[policy]]
algorithm = "gcra"
id = "login.ip"
scope = "ip"
quota = 3
period = { secs = 900, nanos = 0 }
burst_capacity = 3
"#;

/// The log of the change from a fixed window to GCRA: subject A at the old
/// limit, B below it.
fn fixed_window_to_gcra_log() -> String {
    let (a, b) = ("192.0.2.1", "192.0.2.2");
    log(&[
        (a, 0),
        (a, 1),
        (a, 2),
        (a, 3),
        (a, 4),
        (a, 5),
        (b, 10),
        (b, 11),
        (a, 60),
        (a, 61),
        (b, 70),
        (b, 71),
        (b, 72),
        (b, 73),
        (a, 900),
    ])
}

#[test]
fn a_change_of_algorithm_carries_a_fixed_window_into_gcra() {
    // Five per 15 minutes, then (at 60) GCRA of three per 15 minutes, burst
    // three: an emission interval T of 300 s, a request admitted when the
    // arrival time after it is at most 3T ahead. A carried state holds its
    // units as if admitted at the carry: the arrival time `now + held × T`.
    //
    // A used five (its window [0, 900)): at 60 the arrival time becomes
    // 60 + 1500 = 1560, kept though 60 is refused (carrying is not
    // consuming); 61 is refused against it, and so is 900 (1560 + 300 lies
    // more than 3T ahead of 900: the five units drain at the new rate). B
    // used two (window [10, 910)): at 70 the arrival time is 70 + 600, and
    // 70 is admitted (900 ahead, exactly 3T); 71 to 73 are refused. A fresh
    // start admits a burst of three each: A's 60, 61 and 900, B's 70, 71
    // and 72.
    let change = change(
        &fixed_windows(&[("login.ip", 5)]),
        "+60s",
        GCRA_THREE_PER_15M,
    );
    let replayed = replay(&change, Mode::Independent, &fixed_window_to_gcra_log());
    let (continuing, fresh_start) = replayed.column(0);
    assert_eq!(
        continuing[8..],
        [false, false, true, false, false, false, false]
    );
    assert_eq!(
        fresh_start[8..],
        [true, true, true, true, true, false, true]
    );
    let row = &replayed.change().rows[0];
    assert_eq!(
        (row.from_algorithm.as_deref(), row.algorithm.as_str()),
        (Some("fixed_window"), "gcra")
    );
    assert_eq!(pair(row.before_change), (7, 1));
    assert_eq!(pair(row.continuing.after_change), (1, 6));
    assert_eq!(pair(row.fresh_start.after_change), (6, 1));
    assert_eq!((row.given_away.requests, row.given_away.subjects), (5, 2));
    assert_eq!(row.held_back.requests, 0);
}

#[test]
fn the_table_shows_the_change_beside_the_fresh_start() {
    // The decisions of `a_change_of_algorithm_carries_a_fixed_window_into_gcra`,
    // with a new id and a retired one. Refusals of login.ip: A's 5 by the
    // window (retry 895 s), A's 60, 61 and 900 against the arrival time 1560
    // (retry 1560 + 300 - 900 - now: 900, 899 and 60 s), B's 71 to 73 (299,
    // 298 and 297 s).
    // The continuing store holds A's and B's keys under both policies, each
    // 152 bytes in a store of all three algorithms.
    let change = change(
        &fixed_windows(&[("login.ip", 5), ("login.old", 100)]),
        "+60s",
        &format!(
            "{GCRA_THREE_PER_15M}\n{}",
            fixed_windows(&[("login.new", 100)])
        ),
    );
    let replayed = replay(&change, Mode::Independent, &fixed_window_to_gcra_log());
    assert_eq!(
        replayed.report.to_table(),
        "\
15 requests from 2 subjects, 2026-01-01T00:00:00Z to 2026-01-01T00:15:00Z; 0 uncharged; 0 malformed lines
policy     quota               admitted  denied  denied %  subjects denied  retry p50/p99/max  peak keys  peak bytes
login.ip   3 per 15m, burst 3         8       7     46.67      2 (100.00%)     299s/900s/900s          4       608 B
login.new  100 per 15m               15       0      0.00        0 (0.00%)                  -          2       304 B

policy change at 2026-01-01T00:01:00Z (+1m): 8 requests before it, 7 after
retired at the change: login.old
login.ip: fixed_window 5 per 15m → gcra 3 per 15m, burst 3
               admitted after  denied after  admitted overall  denied overall
  continuing                1             6                 8               7
  fresh start               6             1                13               2
  a fresh start would have given away 5 requests to 2 subjects
login.new: new: fixed_window 100 per 15m
               admitted after  denied after  admitted overall  denied overall
  continuing                7             0                15               0
  fresh start               7             0                15               0
  a fresh start would have given away nothing

most denied for login.ip (as written):
           4  192.0.2.1
           3  192.0.2.2
"
    );
}

#[test]
fn a_batch_changes_all_its_policies_at_once() {
    // Before: `a` three and `b` two per 15 minutes, as one batch: 0 and 1
    // are admitted, `b` refuses 2 (charging neither). At 60, `a` drops to
    // two (continuing: its two used, so 60 to 62 are refused), `b` is
    // retired and `c` starts. A fresh start admits 60 and 61.
    let change = change(
        &fixed_windows(&[("a", 3), ("b", 2)]),
        "+60s",
        &fixed_windows(&[("a", 2), ("c", 5)]),
    );
    let h = "192.0.2.1";
    let replayed = replay(
        &change,
        Mode::Batch,
        &log(&[(h, 0), (h, 1), (h, 2), (h, 60), (h, 61), (h, 62)]),
    );
    let (continuing, fresh_start) = replayed.column(0);
    assert_eq!(continuing, [true, true, false, false, false, false]);
    assert_eq!(fresh_start, [true, true, false, true, true, false]);
    let row = &replayed.report.rows[0];
    assert_eq!(row.policy, "batch");
    assert_eq!(row.quota, "a: 2 per 15m; c: 5 per 15m");
    // Refusals before the change are named by the old policy.
    assert_eq!(
        row.denied_by
            .iter()
            .map(|(id, n)| (id.as_str(), *n))
            .collect::<Vec<_>>(),
        [("a", 3), ("b", 1), ("c", 0)]
    );
    let summary = replayed.change();
    assert_eq!(summary.retired, ["b"]);
    let change_row = &summary.rows[0];
    assert_eq!(
        change_row.from_quota.as_deref(),
        Some("a: 3 per 15m; b: 2 per 15m")
    );
    assert_eq!(pair(change_row.continuing.after_change), (0, 3));
    assert_eq!(pair(change_row.fresh_start.after_change), (2, 1));
    assert_eq!(change_row.given_away.requests, 2);
}

#[test]
fn a_batch_may_change_algorithm_but_each_side_holds_one() {
    let old = PolicySet::from_toml(&fixed_windows(&[("login.ip", 5)])).expect("valid");
    let new = PolicySet::from_toml(GCRA_THREE_PER_15M).expect("valid");
    let mixed = PolicySet::from_toml(&format!(
        "{GCRA_THREE_PER_15M}\n{}",
        fixed_windows(&[("other", 5)])
    ))
    .expect("valid");
    let options = || {
        let mut options = ReplayOptions::new(KeyHasher::new(SECRET).expect("a long secret"));
        options.mode = Mode::Batch;
        options
    };
    let at = ChangeAt::AfterFirstRequest(std::time::Duration::from_secs(60));
    let across = PolicyChange::new(old.clone(), at, new).expect("a valid change");
    assert!(Replay::with_change(&across, options()).is_ok());
    let into_mixed = PolicyChange::new(old, at, mixed).expect("a valid change");
    assert!(matches!(
        Replay::with_change(&into_mixed, options()),
        Err(SimulationError::MixedAlgorithms { .. })
    ));
}

#[test]
fn a_new_id_starts_at_the_change_and_a_fresh_start_gives_it_nothing() {
    let change = change(
        &fixed_windows(&[("login.ip", 5)]),
        "+60s",
        &fixed_windows(&[("login.ip", 5), ("login.new", 1)]),
    );
    let h = "192.0.2.1";
    let replayed = replay(
        &change,
        Mode::Independent,
        &log(&[(h, 0), (h, 1), (h, 60), (h, 61)]),
    );
    assert!(change.predecessor(1).is_none());
    let (continuing, fresh_start) = replayed.column(1);
    assert_eq!(continuing, [true, true, true, false]);
    assert_eq!(continuing, fresh_start);
    let row = &replayed.change().rows[1];
    assert_eq!(
        (row.from_algorithm.as_ref(), row.from_quota.as_ref()),
        (None, None)
    );
    assert_eq!(pair(row.before_change), (2, 0));
    assert_eq!(row.given_away.requests + row.held_back.requests, 0);
}

#[test]
fn a_line_a_little_back_in_time_after_the_change_is_replayed_under_the_new_policies() {
    // 61 is the first request at or after the change at 60; 59 follows it,
    // a little back in time, so it is evaluated at 61, after the change:
    // continuing, refused by the lowered limit as 61 is.
    let change = change(
        &fixed_windows(&[("login.ip", 2)]),
        "+60s",
        &fixed_windows(&[("login.ip", 1)]),
    );
    let h = "192.0.2.1";
    let replayed = replay(
        &change,
        Mode::Independent,
        &log(&[(h, 0), (h, 61), (h, 59)]),
    );
    let (continuing, fresh_start) = replayed.column(0);
    assert_eq!(continuing, [true, false, false]);
    assert_eq!(fresh_start, [true, true, false]);
    let summary = replayed.change();
    assert_eq!((summary.requests_before, summary.requests_after), (1, 2));
}

#[test]
fn a_new_policy_of_an_old_id_with_another_scope_is_refused_at_its_line() {
    let before = PolicySet::from_toml(&fixed_windows(&[("login.ip", 5)])).expect("valid");
    let after = fixed_windows(&[("other", 1), ("login.ip", 5)]).replace(
        "id = \"login.ip\"\nscope = \"ip\"",
        "id = \"login.ip\"\nscope = \"user\"",
    );
    let after = PolicySet::from_toml(&after).expect("valid");
    let error = PolicyChange::new(before, "+1m".parse().expect("an offset"), after)
        .expect_err("another scope");
    assert!(
        matches!(
            &error,
            ChangeError::Predecessor { id, line: Some(8), scope, replaced_scope, .. }
                if id == "login.ip" && scope == "user" && replaced_scope == "ip"
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "invalid [[policy]] at line 8: `login.ip` has scope `user` but the policy it \
         replaces has scope `ip`: a policy can continue only from a policy with the same id \
         and scope; give it another id to start it afresh"
    );
}

#[test]
fn a_change_outside_the_log_is_refused() {
    let h = "192.0.2.1";
    let log = log(&[(h, 60), (h, 120)]);
    let run = |at: &str| {
        let change = change(
            &fixed_windows(&[("login.ip", 5)]),
            at,
            &fixed_windows(&[("login.ip", 3)]),
        );
        let options = ReplayOptions::new(KeyHasher::new(SECRET).expect("a long secret"));
        let mut replay = Replay::with_change(&change, options).expect("a valid simulation");
        let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());
        let mut reader = Reader::new(log.as_bytes(), &spec).expect("a readable log");
        replay
            .run(&mut reader, |_| {})
            .map_err(|error| match error {
                ReplayError::Simulation(SimulationError::ChangeOutsideLog(outside)) => outside,
                error => panic!("{error}"),
            })
            .and_then(|()| replay.require_change())
    };
    assert_eq!(
        run("2026-01-01T00:00:59Z"),
        Err(ChangeOutsideLog::BeforeFirstRequest {
            change_at: "2026-01-01T00:00:59Z".to_owned(),
            first_request: "2026-01-01T00:01:00Z".to_owned(),
        })
    );
    assert_eq!(
        run("+61s"),
        Err(ChangeOutsideLog::AfterLastRequest {
            change_at: "2026-01-01T00:02:01Z".to_owned(),
            last_request: "2026-01-01T00:02:00Z".to_owned(),
        })
    );
    // Its first and last requests are within the log.
    assert_eq!(run("2026-01-01T00:01:00Z"), Ok(()));
    assert_eq!(run("+60s"), Ok(()));
}

#[test]
fn the_json_and_csv_reports_carry_the_change() {
    let change = change(
        &fixed_windows(&[("login.ip", 5)]),
        "+60s",
        GCRA_THREE_PER_15M,
    );
    let replayed = replay(&change, Mode::Independent, &fixed_window_to_gcra_log());
    let json = serde_json::to_value(&replayed.report).expect("serializes");
    let row = &json["change"]["rows"][0];
    assert_eq!(row["given_away"]["requests"], 5);
    assert_eq!(row["fresh_start"]["after_change"]["admitted"], 6);
    assert_eq!(row["continuing"]["overall"]["denied"], 7);

    let mut csv = Vec::new();
    replayed.report.write_csv(&mut csv).expect("writes");
    let csv = String::from_utf8(csv).expect("UTF-8");
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header = reader.headers().expect("a header").clone();
    let record = reader.records().next().expect("a row").expect("a record");
    let field = |name: &str| {
        let column = header.iter().position(|h| h == name).expect(name);
        record[column].to_owned()
    };
    assert_eq!(field("from_algorithm"), "fixed_window");
    assert_eq!(field("admitted_after_change"), "1");
    assert_eq!(field("fresh_start_admitted_after_change"), "6");
    assert_eq!(field("fresh_start_admitted"), "13");
    assert_eq!(field("given_away"), "5");
    assert_eq!(field("given_away_subjects"), "2");
}

#[test]
fn a_replay_without_a_change_reports_none() {
    let set = PolicySet::from_toml(&fixed_windows(&[("login.ip", 5)])).expect("valid");
    let options = ReplayOptions::new(KeyHasher::new(SECRET).expect("a long secret"));
    let mut replay = Replay::new(&set, options).expect("a valid simulation");
    let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());
    let log = line("192.0.2.1", 0);
    let mut reader = Reader::new(log.as_bytes(), &spec).expect("a readable log");
    replay.run(&mut reader, |_| {}).expect("runs");
    replay.require_change().expect("no change to miss");
    let report = replay.report();
    assert!(report.change.is_none());
    let json = serde_json::to_value(&report).expect("serializes");
    assert!(json.get("change").is_none(), "{json}");
}
