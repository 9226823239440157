//! `Config::load_dir`: which files of a directory load, in which order, and
//! how problems name them.

use std::{
    fs,
    path::{Path, PathBuf},
};

use runlimit_server::config::{Config, ConfigError, Entry, ProblemKind};

fn fixtures(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A fresh directory for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("runlimit-server-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("a scratch directory");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn yaml_files_load_recursively_and_dot_entries_and_other_files_are_skipped() {
    let config = Config::load_dir(fixtures("config")).expect("valid");
    let names: Vec<_> = config.domains().map(|d| d.name()).collect();
    assert_eq!(names, ["api", "edge"]);
    assert!(config.warnings().is_empty());

    let edge = config.domain("edge").expect("edge");
    let login = [
        Entry::new("path", "/login"),
        Entry::new("remote_address", "198.51.100.4"),
    ];
    let matched = edge.resolve(&login).expect("a rule");
    assert_eq!(matched.rule.path.as_str(), "path_/login.remote_address");

    let api = config.domain("api").expect("api");
    let matched = api
        .resolve(&[Entry::new("tenant", "team-7")])
        .expect("a rule");
    assert_eq!(matched.subject.as_slice(), ["team-*"]);
}

#[test]
fn one_domain_in_two_files_is_refused_naming_the_later_file() {
    let error = Config::load_dir(fixtures("duplicate")).expect_err("a duplicate domain");
    let [problem] = error.problems() else {
        panic!("{error}");
    };
    assert_eq!(
        problem.kind(),
        &ProblemKind::DuplicateDomain {
            domain: "shared".to_owned()
        }
    );
    assert_eq!(problem.location().file(), "nested/b.YAML");
    assert_eq!(problem.location().line(), 2);
    assert_eq!(
        problem.to_string(),
        "nested/b.YAML: duplicate domain 'shared' in config file (at domain, line 2, column 9)"
    );
}

#[test]
fn files_load_in_path_order() {
    let scratch = Scratch::new("order");
    // Written out of order; `b.yaml` sorts before `b/c.yaml`.
    for (name, domain) in [
        ("b/c.yaml", "shared"),
        ("b.yaml", "shared"),
        ("a.yaml", "a"),
    ] {
        let path = scratch.0.join(name);
        fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
        fs::write(path, format!("domain: {domain}\n")).expect("written");
    }
    let error = Config::load_dir(&scratch.0).expect_err("a duplicate domain");
    assert_eq!(error.problems()[0].location().file(), "b/c.yaml");
}

#[test]
fn an_empty_directory_is_an_empty_configuration() {
    let scratch = Scratch::new("empty");
    let config = Config::load_dir(&scratch.0).expect("valid");
    assert_eq!(config.domains().count(), 0);
}

#[test]
fn a_missing_directory_is_a_read_error() {
    let error = Config::load_dir(fixtures("no-such-directory")).expect_err("missing");
    assert!(matches!(error, ConfigError::Read { .. }), "{error:?}");
    assert!(error.problems().is_empty());
}

#[test]
fn a_file_that_is_not_utf8_is_refused() {
    let scratch = Scratch::new("utf8");
    fs::write(scratch.0.join("d.yaml"), b"domain: \xff\xfe\n").expect("written");
    let error = Config::load_dir(&scratch.0).expect_err("not UTF-8");
    assert_eq!(
        error.problems()[0].to_string(),
        "d.yaml: error loading config file: yaml: the file is not valid UTF-8 (line 1, column 1)"
    );
}

#[cfg(unix)]
#[test]
fn symbolic_links_are_followed_but_not_in_a_loop() {
    let scratch = Scratch::new("links");
    let real = scratch.0.join("real");
    fs::create_dir_all(&real).expect("a directory");
    fs::write(real.join("d.yaml"), "domain: d\n").expect("written");
    let config = scratch.0.join("config");
    fs::create_dir_all(&config).expect("a directory");
    // A linked file, as a mounted ConfigMap holds them, and a link back up.
    std::os::unix::fs::symlink(real.join("d.yaml"), config.join("d.yaml")).expect("a link");
    std::os::unix::fs::symlink(&config, config.join("loop")).expect("a link");
    // A broken link is skipped unless it is named as a configuration file.
    std::os::unix::fs::symlink(scratch.0.join("gone"), config.join("notes.txt")).expect("a link");
    let loaded = Config::load_dir(&config).expect("valid");
    let names: Vec<_> = loaded.domains().map(|d| d.name()).collect();
    assert_eq!(names, ["d"]);

    std::os::unix::fs::symlink(scratch.0.join("gone"), config.join("e.yaml")).expect("a link");
    let error = Config::load_dir(&config).expect_err("a broken configuration file");
    assert!(matches!(error, ConfigError::Read { .. }), "{error:?}");
}
