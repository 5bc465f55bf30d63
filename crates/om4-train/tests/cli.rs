//! The `om4-train` binary end to end on the CPU: training on the demo store with a checkpoint and
//! a resume, the device-preparation check, and the errors a user meets (bad flags, bad files)
//! as one line and a failing exit status, never a panic.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `om4-train` with the demo store under `dir`.
fn om4_train(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_om4-train"))
        .args(args)
        .env("OM4_DEMO_DIR", dir.join("demo"))
        .output()
        .expect("run om4-train")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The demo store split into 3 training batches and 4 validation ones (a short epoch).
fn short_config(dir: &Path) -> String {
    let path = dir.join("short.yaml");
    std::fs::write(&path, "data:\n  train_time: {end: \"1958-04-01\"}\n  val_time: {start: \"1959-10-01\"}\n").unwrap();
    path.to_str().unwrap().to_string()
}

/// `(train loss, val loss)` of each epoch line.
fn losses(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter(|l| l.starts_with("epoch "))
        .map(|l| {
            let word = |key: &str| l.split(key).nth(1).unwrap().split_whitespace().next().unwrap().to_string();
            (word("train loss "), word("val loss "))
        })
        .collect()
}

/// Two epochs in one run equal one epoch, a checkpoint, and a resumed run's second epoch.
#[test]
fn trains_the_demo_and_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let config = short_config(dir.path());
    let whole = om4_train(dir.path(), &["train", "--epochs", "2", "--config", &config]);
    let (stdout, stderr) = text(&whole);
    assert!(whole.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("writing (once) the synthetic demo store"), "{stdout}");
    assert!(stdout.contains("training tiny on") && stdout.contains("3 batches/epoch"), "{stdout}");
    let whole_losses = losses(&stdout);
    assert_eq!(whole_losses.len(), 2, "{stdout}");
    for (train, val) in &whole_losses {
        assert!(train.parse::<f64>().unwrap().is_finite() && val.parse::<f64>().unwrap().is_finite(), "{stdout}");
    }

    let ckpt = dir.path().join("ckpt");
    let ckpt = ckpt.to_str().unwrap();
    let first = om4_train(dir.path(), &["train", "--epochs", "1", "--config", &config, "--checkpoint-dir", ckpt]);
    let (stdout, stderr) = text(&first);
    assert!(first.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("using the synthetic demo store"), "the store is written once: {stdout}");
    assert_eq!(losses(&stdout), whole_losses[..1], "{stdout}");

    let resumed =
        om4_train(dir.path(), &["train", "--epochs", "2", "--config", &config, "--checkpoint-dir", ckpt, "--resume"]);
    let (stdout, stderr) = text(&resumed);
    assert!(resumed.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("at epoch 2, batch 1"), "{stdout}");
    assert_eq!(losses(&stdout), whole_losses[1..], "the resumed epoch trains as the uninterrupted one: {stdout}");

    // The checkpoint records its data: a resume with another validation split is refused.
    let other = dir.path().join("other.yaml");
    std::fs::write(&other, "data:\n  train_time: {end: \"1958-04-01\"}\n  val_time: {start: \"1959-07-01\"}\n")
        .unwrap();
    let other = other.to_str().unwrap();
    let refused =
        om4_train(dir.path(), &["train", "--epochs", "3", "--config", other, "--checkpoint-dir", ckpt, "--resume"]);
    let (stdout, stderr) = text(&refused);
    assert_eq!(refused.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("trained on other data") && stderr.contains("val_time: "), "{stderr}");
}

#[test]
fn device_preparation_equals_the_host_reference_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let out = om4_train(dir.path(), &["prepare", "--device", "cpu", "--ny", "8", "--nx", "16"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("equal to the host reference bit for bit"), "{stdout}");
}

/// Each mistake is one `error:` line naming what is wrong, and exit status 1.
#[test]
fn mistakes_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = short_config(dir.path());
    let missing = dir.path().join("missing.npy");
    let missing = missing.to_str().unwrap();
    // A forward pass of `model` whose every file is missing.
    let forward = |model| {
        let mut args = vec!["forward", "--model", model, "--in-channels", "3", "--out-channels", "2"];
        for flag in ["--weights", "--input", "--mask", "--out"] {
            args.extend([flag, missing]);
        }
        args
    };
    let cases: &[(&[&str], &str)] = &[
        (&["train", "--device", "gpu", "--config", &config], "\"gpu\""),
        (&["train", "--device", "cuda:x", "--config", &config], "not a device index"),
        (&["train", "--resident-gb", "0", "--config", &config], "--resident-gb 0"),
        (&["train", "--checkpoint-every", "2", "--config", &config], "--checkpoint-every needs --checkpoint-dir"),
        (&["train", "--resume", "--config", &config], "--resume needs --checkpoint-dir"),
        (&["train", "--model", "huge", "--config", &config], "huge"),
        (&["train", "--store", missing], "missing.npy"),
        (&forward("tiny"), "missing.npy"),
        (&forward("huge"), "unknown model \"huge\""),
    ];
    for (args, needle) in cases {
        let out = om4_train(dir.path(), args);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}\n{stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
