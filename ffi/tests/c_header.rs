//! The committed C header (`include/workload_identity.h`, at the top level) is exactly what
//! cbindgen generates from `ffi/src/` and the login configs' functions
//! `ffi/build.rs` makes.
//! `WID_BLESS=1 cargo test -p workload-identity-ffi --test c_header` rewrites
//! it after a deliberate change.

#[test]
fn committed_header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    let mut builder = cbindgen::Builder::new();
    // The login configs' shared functions, which build.rs writes (cbindgen
    // reads `src/` and does not follow `include!`).
    let mut made: Vec<_> = std::fs::read_dir(env!("OUT_DIR"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("_login_abi.rs"))
        .collect();
    made.sort();
    assert_eq!(made.len(), 2, "build.rs writes one file a login: {made:?}");
    for path in made {
        builder = builder.with_src(path);
    }
    builder
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = format!("{dir}/../include/workload_identity.h");
    if std::env::var_os("WID_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/workload_identity.h is out of date: run `WID_BLESS=1 cargo test -p workload-identity-ffi --test c_header` and commit it"
    );
    for line in generated.lines().filter(|l| l.starts_with("#define ")) {
        let name = line.split_whitespace().nth(1).unwrap();
        assert!(
            name.starts_with("WID_") || name == "WORKLOAD_IDENTITY_H",
            "{name} is not part of the C ABI: exclude it in cbindgen.toml"
        );
    }
    // Plain C comments: no rustdoc link syntax reaches C readers.
    for (i, line) in generated.lines().enumerate() {
        assert!(
            !line.contains("[`") && !line.contains("]("),
            "include/workload_identity.h:{}: rustdoc link syntax in a C comment: {line}",
            i + 1
        );
    }
    for needle in [
        "WID_ABI_VERSION 1",
        "wid_verify(",
        "typedef struct wid_bytes",
    ] {
        assert!(generated.contains(needle), "header lacks {needle}");
    }

    // Each constant named with its value.
    macro_rules! named {
        ($($name:ident),* $(,)?) => { [$((stringify!($name), $name)),*] };
    }
    use workload_identity_ffi::*;
    // The claims' names: the header's macros are the Rust constants.
    for (name, value) in named![
        WID_CLAIM_ALLOCATION_ID,
        WID_CLAIM_NAMESPACE,
        WID_CLAIM_JOB_ID,
        WID_CLAIM_TASK,
        WID_CLAIM_SERVICE,
        WID_CLAIM_SUBJECT,
        WID_CLAIM_ISSUER,
        WID_CLAIM_JWT_ID,
        WID_CLAIM_ISSUED_AT,
        WID_CLAIM_NOT_BEFORE,
        WID_CLAIM_EXPIRES,
        WID_CLAIM_NODE_ID,
        WID_CLAIM_NODE_DATACENTER,
        WID_CLAIM_NODE_POOL,
        WID_CLAIM_NODE_CLASS,
        WID_CLAIM_CONSUL_NAMESPACE,
        WID_CLAIM_VAULT_NAMESPACE,
        WID_CLAIM_VAULT_ROLE,
    ] {
        let line = format!("#define {name} \"{value}\"");
        assert!(
            generated.lines().any(|l| l == line),
            "header lacks `{line}` (cbindgen.toml's after_includes)"
        );
    }
    // Every number C sees: the header's enumerators and macros are exactly the
    // pinned list, names and values.
    let mut in_header: Vec<(String, u64)> = Vec::new();
    for line in generated.lines() {
        let t = line.trim();
        let pair = if let Some(rest) = t.strip_prefix("#define ") {
            rest.split_once(' ')
        } else if t.starts_with("WID_") && t.ends_with(',') {
            t.trim_end_matches(',').split_once(" = ")
        } else {
            None
        };
        if let Some((name, value)) = pair {
            if let Ok(v) = value.parse::<u64>() {
                in_header.push((name.to_string(), v));
            }
        }
    }
    in_header.sort();
    let mut pinned: Vec<(String, u64)> =
        std::fs::read_to_string(format!("{dir}/abi/constants.txt"))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(' ').unwrap();
                (n.to_string(), v.parse().unwrap())
            })
            .collect();
    pinned.sort();
    assert_eq!(
        in_header, pinned,
        "the header's numbers differ from ffi/abi/constants.txt"
    );
    // And the Rust constants (from ffi/src/codes.rs) name the same numbers.
    for (name, value) in named![
        WID_RESULT_OK,
        WID_RESULT_ISSUER_MISMATCH,
        WID_KEY_STATE_DEPRECATED,
        WID_KEY_DERIVATION_NOMAD_RAW_SEED,
        WID_CONSISTENCY_CONSISTENT,
        WID_ALLOC_TERMINAL,
    ] {
        assert!(
            pinned.contains(&(name.to_string(), u64::from(value))),
            "{name}"
        );
    }
    for code in workload_identity::ResultCode::ALL {
        let entry = (code.name().to_string(), u64::from(code.as_u32()));
        assert!(pinned.contains(&entry), "{entry:?} is not pinned");
    }
}
