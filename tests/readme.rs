//! The README's Rust examples are exactly `examples/readme.rs` and
//! `examples/readme_manager.rs` (which CI runs), and they use nothing a crate
//! outside this repository would lack: only `std` and `workload_identity`, no
//! repository files. (The README is also compiled as doctests.)

const README: &str = include_str!("../README.md");

fn rust_blocks() -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in README.lines() {
        match &mut current {
            None if line.trim_end() == "```rust" => current = Some(String::new()),
            Some(_) if line.trim_end() == "```" => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// The example's text without its leading `//!` lines (they say where it is
/// from, which the README need not repeat).
fn example(name: &str) -> String {
    let path = format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .skip_while(|l| l.starts_with("//!"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_readme_examples_are_the_compiled_examples() {
    let blocks = rust_blocks();
    assert!(blocks.len() >= 2, "README has {} rust blocks", blocks.len());
    for (block, file) in blocks.iter().zip(["readme.rs", "readme_manager.rs"]) {
        assert_eq!(
            block,
            &example(file),
            "a README rust block differs from examples/{file}: copy the file into the README"
        );
    }
}

#[test]
fn the_examples_need_nothing_from_this_repository() {
    for file in ["readme.rs", "readme_manager.rs"] {
        let text = example(file);
        for line in text.lines().filter(|l| l.starts_with("use ")) {
            let root = line["use ".len()..].split("::").next().unwrap();
            assert!(
                root == "std" || root == "workload_identity",
                "examples/{file} uses {root}, which an outside crate may not have: {line}"
            );
        }
        for forbidden in [
            "CARGO_MANIFEST_DIR",
            "include_bytes!",
            "include_str!",
            "tests/vectors",
        ] {
            assert!(
                !text.contains(forbidden),
                "examples/{file} reads repository files ({forbidden})"
            );
        }
    }
}
