//! The committed C header is exactly what cbindgen generates from `src/ffi/`.
//! `WID_BLESS=1 cargo test --test c_header` rewrites it after a deliberate change.

#[test]
fn committed_header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = format!("{dir}/include/workload_identity.h");
    if std::env::var_os("WID_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/workload_identity.h is out of date: run `WID_BLESS=1 cargo test --test c_header` and commit it"
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
        "WID_RESULT_DUPLICATE_KEY 31",
        "WID_RESULT_ISSUER_MISMATCH 17",
    ] {
        assert!(generated.contains(needle), "header lacks {needle}");
    }
}
