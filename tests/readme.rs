//! The README's Rust example is exactly `examples/readme.rs` and the first
//! of docs/rust.md is `examples/readme_manager.rs` (CI runs both), and they
//! use nothing a crate outside this repository would lack: only `std` and
//! `workload_identity`, no repository files. (The README and every page of
//! docs/ are also compiled as doctests.) The README stays short: what it is,
//! the two commands, one example and a map of docs/.

const README: &str = include_str!("../README.md");
const RUST_DOC: &str = include_str!("../docs/rust.md");

fn rust_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
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
    for (doc, text, file) in [
        ("README.md", README, "readme.rs"),
        ("docs/rust.md", RUST_DOC, "readme_manager.rs"),
    ] {
        let blocks = rust_blocks(text);
        let first = blocks
            .first()
            .unwrap_or_else(|| panic!("{doc} has no rust block"));
        assert_eq!(
            first,
            &example(file),
            "{doc}'s first rust block differs from examples/{file}: copy the file into {doc}"
        );
    }
    assert_eq!(
        rust_blocks(README).len(),
        1,
        "the README has one Rust example; longer ones belong in docs/"
    );
}

/// What issue 33 asked of the README: a newcomer's screen or two, with every
/// reader's page one link away, and those links pointing at files that exist.
#[test]
fn the_readme_is_short_and_its_map_leads_somewhere() {
    let lines = README.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines: move detail to docs/"
    );
    for page in [
        "docs/rust.md",
        "docs/keys.md",
        "docs/etcd.md",
        "docs/c.md",
        "docs/go.md",
        "docs/wid.md",
        "docs/kubernetes.md",
        "docs/relying-parties.md",
        "docs/vault.md",
        "docs/security.md",
        "docs/design.md",
    ] {
        assert!(
            README.contains(&format!("]({page}")),
            "the README's map does not link {page}"
        );
    }
    // Each command, and how long it takes, in the comment just above it.
    let lines: Vec<&str> = README.lines().collect();
    for command in ["cargo run --locked -p quickstart", "bash .ci/run"] {
        let at = lines
            .iter()
            .position(|l| *l == command)
            .unwrap_or_else(|| panic!("the README lacks `{command}` on a line of its own"));
        let comment: Vec<&str> = lines[..at]
            .iter()
            .rev()
            .take_while(|l| l.starts_with('#'))
            .copied()
            .collect();
        assert!(
            comment.iter().any(|l| l.contains("minute")),
            "the README does not say how long `{command}` takes"
        );
    }
}

/// Every relative Markdown link in the READMEs and docs/ names a file that
/// exists, and every `#anchor` into a page names one of its headings (not a
/// `#` line inside a code block).
#[test]
fn relative_links_in_the_docs_resolve() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<_> = [
        "README.md",
        "bindings/README.md",
        "bindings/c/README.md",
        "bindings/go/README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut checked = 0;
    for page in &pages {
        let text = prose(&std::fs::read_to_string(page).unwrap());
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').expect("a closed link");
            let target = &rest[..end];
            rest = &rest[end..];
            if target.contains("://") || target.starts_with('`') {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target, None),
            };
            let dest = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            assert!(
                dest.exists(),
                "{}: link to {target}: {} does not exist",
                page.display(),
                dest.display()
            );
            if let Some(anchor) = anchor {
                let dest_text = prose(&std::fs::read_to_string(&dest).unwrap());
                assert!(
                    dest_text
                        .lines()
                        .filter(|l| l.starts_with('#'))
                        .any(|l| github_anchor(l) == anchor),
                    "{}: link to {target}: no such heading in {}",
                    page.display(),
                    dest.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} links checked");
}

/// Every page with a Rust block is compiled as doctests (src/lib.rs includes
/// it under `cfg(doctest)`), so no example in docs/ can rot.
#[test]
fn every_docs_page_with_rust_is_doctested() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if text.lines().any(|l| l.starts_with("```rust")) {
            assert!(
                lib.contains(&format!("include_str!(\"../docs/{name}\")")),
                "docs/{name} has Rust blocks but src/lib.rs does not doctest it"
            );
        }
    }
}

/// A Markdown page without its fenced code blocks: a `# comment` in a shell
/// block is no heading, and `](` in code is no link.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The anchor GitHub gives a heading: lower case, punctuation other than `-`
/// and `_` dropped, spaces to `-`.
fn github_anchor(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
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
