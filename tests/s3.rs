//! The `om4` commands and the pipeline's store source on `s3://` stores (and `inspect` on the same
//! objects over plain HTTP) (feature `s3`), against
//! the local S3 servers of `scripts/s3-server.sh` (moto on 127.0.0.1): each command's output
//! equals its output on the local copy, the S3-backed `Om4Source` passes the conformance suite
//! against the local copy's planes (and a loader reads two of its batches at once by default), and
//! wrong credentials are clear errors. Without the servers' variables each test prints that it was
//! skipped and checks nothing else.
#![allow(missing_docs)]

#[path = "../crates/om4-store/tests/s3_support/mod.rs"]
mod s3_support;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use s3_support::{auth_server, bucket, endpoint, upload, upload_as};

fn om4(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_om4"));
    // credentials and endpoint only from what the test gives
    for var in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_PROFILE"] {
        cmd.env_remove(var);
    }
    cmd.args(args).envs(env.iter().copied()).output().expect("run om4")
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn synth(dir: &Path) {
    let d = dir.to_str().unwrap();
    ok(&om4(&["synth", d, "--ny", "6", "--nx", "12", "--times", "12", "--levels", "2", "--codec", "blosc-lz4"], &[]));
}

#[test]
fn commands_read_s3_as_the_local_copy() {
    let Some(endpoint) = endpoint("cli") else { return };
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path());
    let bucket = bucket(&endpoint, "cli");
    upload(&endpoint, &bucket, dir.path(), "run");
    let url = format!("s3://{bucket}/run/OM4.zarr");
    let local = dir.path().join("OM4.zarr");
    let local = local.to_str().unwrap();
    let remote = ["--endpoint-url", endpoint.as_str(), "--anon"];
    let both = |args: &[&str], extra: &[&str]| {
        let with = |store: &str, remote: &[&str]| {
            let mut a: Vec<&str> = args.iter().map(|a| if *a == "STORE" { store } else { a }).collect();
            a.extend_from_slice(extra);
            a.extend_from_slice(remote);
            ok(&om4(&a, &[]))
        };
        (with(&url, &remote), with(local, &[]))
    };

    let (r, l) = both(&["inspect", "STORE", "--json"], &[]);
    let (r, l): (serde_json::Value, serde_json::Value) =
        (serde_json::from_str(&r).unwrap(), serde_json::from_str(&l).unwrap());
    for key in ["layout", "formats", "channels", "grid", "time", "codecs", "chunks", "masks", "levels", "problems"] {
        assert_eq!(r[key], l[key], "inspect: {key}");
    }
    assert_eq!(r["statistics"], serde_json::json!(["OM4_means.zarr", "OM4_stds.zarr"]), "{r}");
    // the same objects over plain HTTP (the bucket is public; the synthetic store is consolidated)
    let http = format!("{endpoint}/{bucket}/run/OM4.zarr");
    let h: serde_json::Value =
        serde_json::from_str(&ok(&om4(&["inspect", &http, "--json", "--concurrency", "64"], &[]))).unwrap();
    for key in [
        "layout",
        "formats",
        "channels",
        "grid",
        "time",
        "codecs",
        "chunks",
        "masks",
        "levels",
        "problems",
        "statistics",
    ] {
        assert_eq!(h[key], r[key], "inspect over http: {key}");
    }
    assert_eq!(h["store"], serde_json::json!(http));
    let out = om4(&["inspect", &http, "--anon"], &[]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("apply to s3:// stores"));

    let (r, _) = both(&["validate", "STORE"], &[]);
    assert!(r.starts_with("ok: 12 channels readable"), "{r}");

    let out = tempfile::tempdir().unwrap();
    let npy = |name: &str| out.path().join(name).to_str().unwrap().to_string();
    let (rn, ln) = (npy("remote.npy"), npy("local.npy"));
    for (store, file, remote) in [(url.as_str(), &rn, &remote[..]), (local, &ln, &[][..])] {
        let mut a = vec!["dump", store, "--channels", "thetao_0,zos,hfds", "--times", "0,5,11", "--out", file];
        a.extend_from_slice(remote);
        ok(&om4(&a, &[]));
    }
    assert_eq!(std::fs::read(&rn).unwrap(), std::fs::read(&ln).unwrap(), "dump");

    let (rs, ls) = (npy("remote-stats"), npy("local-stats"));
    let stats = |store: &str, out: &str, remote: &[&str]| {
        let mut a = vec!["stats", store, "--out", out, "--json"];
        a.extend_from_slice(remote);
        let v: serde_json::Value = serde_json::from_str(&ok(&om4(&a, &[]))).unwrap();
        v["channels"].clone()
    };
    assert_eq!(stats(&url, &rs, &remote), stats(local, &ls, &[]), "stats");

    let (rb, lb) = (npy("remote-batch"), npy("local-batch"));
    for (store, dir, remote) in [(url.as_str(), &rb, &remote[..]), (local, &lb, &[][..])] {
        let mut a = vec![
            "batch",
            "--store",
            store,
            "--prognostic",
            "thetao_0,thetao_1,zos",
            "--boundary",
            "hfds",
            "--history",
            "1",
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--batches",
            "1",
            "--out",
            dir,
        ];
        a.extend_from_slice(remote);
        ok(&om4(&a, &[]));
    }
    let files = |root: &str| {
        let mut found = Vec::new();
        let mut todo = vec![std::path::PathBuf::from(root)];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() { todo.push(p) } else { found.push(p.strip_prefix(root).unwrap().to_path_buf()) }
            }
        }
        found.sort();
        found
    };
    let names = files(&lb);
    assert_eq!(files(&rb), names);
    assert!(names.iter().any(|p| p.ends_with("model_input.npy")), "{names:?}");
    for name in &names {
        let (r, l) =
            (std::fs::read(Path::new(&rb).join(name)).unwrap(), std::fs::read(Path::new(&lb).join(name)).unwrap());
        assert_eq!(r, l, "batch file {}", name.display());
    }

    // options that only an s3:// store takes
    let out = om4(&["inspect", local, "--anon"], &[]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("apply to s3:// stores"));
}

#[test]
fn wrong_credentials_are_clear_errors() {
    let Some((endpoint, key, secret)) = auth_server("credentials") else { return };
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path());
    let prefix = format!("cli-{}", std::process::id());
    upload_as(&endpoint, "om4-auth", dir.path(), &prefix, (&key, &secret));
    let url = format!("s3://om4-auth/{prefix}/OM4.zarr");
    let inspect = |env: &[(&str, &str)], anon: bool| {
        let mut a = vec!["inspect", url.as_str(), "--endpoint-url", endpoint.as_str()];
        if anon {
            a.push("--anon");
        }
        om4(&a, env)
    };
    let right = ok(&inspect(&[("AWS_ACCESS_KEY_ID", &key), ("AWS_SECRET_ACCESS_KEY", &secret)], false));
    assert!(right.contains(&format!("store      {url}")) && right.contains("channels   12 ("), "{right}");

    for (env, anon, expect) in [
        (
            vec![("AWS_ACCESS_KEY_ID", key.as_str()), ("AWS_SECRET_ACCESS_KEY", "not-the-secret")],
            false,
            "SignatureDoesNotMatch",
        ),
        (
            vec![("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000"), ("AWS_SECRET_ACCESS_KEY", "x")],
            false,
            "InvalidAccessKeyId",
        ),
        (vec![], true, "403"),
    ] {
        let out = inspect(&env, anon);
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("{expect}: {err}");
        assert!(!out.status.success(), "{expect}: succeeded");
        assert!(err.contains(expect) && err.contains(&url), "{expect}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn the_s3_store_source_conforms() {
    // The conformance suite every data source passes, on an Om4Source over S3, with the truth read
    // plane by plane from the local copy (flat v2 consolidated and compact v3 sharded).
    use om4_batch::{SampleSpace, Schedule, WindowSpec};
    use om4_pipeline::conformance::{Intercept, check_source, epoch_bits};
    use om4_pipeline::{BatchSource, Loader, LoaderConfig, PrepareOn};
    use om4_store::{DataConfig, S3Location, StoreLocation, SynthConfig, SynthLayout, ZarrFormat};
    use om4_testkit::naive_store_truth;

    let Some(endpoint) = endpoint("conformance") else { return };
    for (layout, format, shard) in
        [(SynthLayout::Flat, ZarrFormat::V2, None), (SynthLayout::Compact, ZarrFormat::V3, Some(4))]
    {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SynthConfig { ny: 6, nx: 10, times: 16, levels: 2, layout, format, shard, ..SynthConfig::default() };
        let paths = om4_store::synthesize(dir.path(), &cfg, |_, _| {}).unwrap();
        let bucket = bucket(&endpoint, "conformance");
        upload(&endpoint, &bucket, dir.path(), "run");
        let at = |name: &str| {
            StoreLocation::S3(S3Location {
                bucket: bucket.clone(),
                path: format!("run/{name}"),
                endpoint_url: Some(endpoint.clone()),
                anon: true,
                ..S3Location::default()
            })
        };
        // Statistics beside the store, on S3 as locally; the truth reads the local copy.
        let open = |location: StoreLocation| {
            let mut data = DataConfig::at(location);
            data.source.train_time = "1958-01-11..".parse().unwrap();
            data.read_threads = 2;
            data.open().unwrap()
        };
        let (remote, local) = (open(at("OM4.zarr")), open(paths.data.into()));
        let source = remote.train;
        let truth = naive_store_truth(&source, &local.spec).unwrap();
        let source = Arc::new(source);
        check_source(Arc::clone(&source), &truth).unwrap_or_else(|e| panic!("{layout:?} {format:?}: {e}"));
        // By default a loader keeps two batch reads of a remote store in flight: batch 0's read
        // waits for batch 1's to begin, and the batches are the truth's.
        assert_eq!(source.batch_reads_in_flight(), 2);
        let space = SampleSpace::single(WindowSpec::new(1, 1, 1).unwrap(), source.time_len()).unwrap();
        let schedule = Schedule::training(2, 5, None).unwrap();
        let overlapping = Arc::new(Intercept::overlapping(source, &space, schedule, 0, 1).unwrap());
        let config = LoaderConfig { prepare_on: PrepareOn::Host, ..LoaderConfig::default() };
        let got = epoch_bits(&Loader::new(overlapping, space.clone(), schedule, config)).unwrap();
        let want = epoch_bits(&Loader::new(Arc::new(truth), space, schedule, config)).unwrap();
        assert_eq!(got, want, "{layout:?} {format:?}: batches read two at a time from S3");
    }
}
