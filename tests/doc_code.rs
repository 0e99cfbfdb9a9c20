//! Code the docs show is code CI builds and runs. A fenced block in docs/
//! that follows a line `<!-- shown from PATH -->` must be the file PATH
//! (relative to the repository), whole; one that follows
//! `<!-- shown from PATH#NAME -->` must be the lines of PATH between a line
//! containing `doc:begin NAME` and one containing `doc:end NAME` (those two
//! lines left out). The files are compiled and run elsewhere in CI (the C
//! ones by scripts/c-tests.sh, the Go ones by their go tests, the seed-001
//! host by its loop against OpenBao and the Consul stand-in), so a doc that
//! drifts from them fails here.

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Every (doc, line number, source, block) the docs show.
fn shown() -> Vec<(String, usize, String, String)> {
    let mut out = Vec::new();
    let mut docs: Vec<_> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    for doc in docs {
        let text = std::fs::read_to_string(&doc).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let name = doc.strip_prefix(ROOT).unwrap().display().to_string();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i].trim();
            if let Some(source) = line
                .strip_prefix("<!-- shown from ")
                .and_then(|r| r.strip_suffix(" -->"))
            {
                assert!(
                    lines.get(i + 1).is_some_and(|l| l.starts_with("```")),
                    "{name}:{}: `{line}` must be followed by a fenced block",
                    i + 1
                );
                let mut block = String::new();
                let mut j = i + 2;
                while j < lines.len() && lines[j].trim_end() != "```" {
                    block.push_str(lines[j]);
                    block.push('\n');
                    j += 1;
                }
                out.push((name.clone(), i + 1, source.to_string(), block));
                i = j;
            }
            i += 1;
        }
    }
    out
}

/// The text `source` names: a whole file, or one region of it.
fn source_text(source: &str) -> String {
    let (path, region) = match source.split_once('#') {
        Some((p, r)) => (p, Some(r)),
        None => (source, None),
    };
    let text = std::fs::read_to_string(Path::new(ROOT).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let Some(region) = region else {
        return text;
    };
    let begin = format!("doc:begin {region}");
    let end = format!("doc:end {region}");
    let mut out = String::new();
    let mut inside = false;
    let mut found = false;
    for line in text.lines() {
        if line.contains(&end) {
            assert!(inside, "{path}: `{end}` before `{begin}`");
            inside = false;
        } else if line.contains(&begin) {
            inside = true;
            found = true;
        } else if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(found && !inside, "{path}: no complete region {region}");
    out
}

#[test]
fn every_block_the_docs_show_from_a_file_is_that_file() {
    let shown = shown();
    for (doc, line, source, block) in &shown {
        assert_eq!(
            block,
            &source_text(source),
            "{doc}:{line}: the block differs from {source}: copy it into the doc again"
        );
    }
    // The identity manager, from each language (issue 42).
    let showing: Vec<&str> = shown.iter().map(|(doc, ..)| doc.as_str()).collect();
    for want in ["docs/c.md", "docs/vault.md", "docs/consul.md"] {
        assert!(
            showing.iter().any(|doc| doc.ends_with(want)),
            "{want} shows no code from a file CI runs (it shows: {showing:?})"
        );
    }
}

/// The region of `text` between a line starting `<!-- doc:begin NAME` and
/// one starting `<!-- doc:end NAME`, those lines left out.
fn doc_region(text: &str, name: &str) -> Option<String> {
    let begin = format!("<!-- doc:begin {name}");
    let end = format!("<!-- doc:end {name}");
    let mut lines = text.lines().skip_while(|l| !l.starts_with(&begin));
    lines.next()?;
    let mut out = String::new();
    for line in lines {
        if line.starts_with(&end) {
            return Some(out);
        }
        out.push_str(line);
        out.push('\n');
    }
    None
}

#[test]
fn what_a_restore_does_is_said_in_one_wording() {
    // A host learns from these when a task's token changes: the three
    // pages must not drift apart.
    let pages = ["docs/go.md", "bindings/go/README.md", "docs/vault.md"];
    let regions: Vec<String> = pages
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(Path::new(ROOT).join(p)).unwrap();
            doc_region(&text, "restore").unwrap_or_else(|| {
                panic!("{p}: no <!-- doc:begin restore --> ... <!-- doc:end restore --> region")
            })
        })
        .collect();
    assert!(regions[0].contains("What a restore does"), "{}", regions[0]);
    for (p, r) in pages.iter().zip(&regions).skip(1) {
        assert_eq!(
            r, &regions[0],
            "{p} says what a restore does otherwise than {}",
            pages[0]
        );
    }
}
