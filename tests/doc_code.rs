//! Code the docs show is code CI builds and runs. A fenced block in docs/
//! that follows a line `<!-- shown from PATH -->` must be the file PATH
//! (relative to the repository), whole; one that follows
//! `<!-- shown from PATH#NAME -->` must be the lines of PATH between a line
//! containing `doc:begin NAME` and one containing `doc:end NAME` (those two
//! lines left out). The files are compiled and run elsewhere in CI (the C
//! ones by scripts/c-tests.sh, the Go ones by their go tests, the seed-001
//! host by its loop against OpenBao and the Consul stand-in), so a doc that
//! drifts from them fails here.
//!
//! Every other block a reader could run (shell, C, Go, untagged, Rust that
//! is not a doctest of src/lib.rs) follows `<!-- run by PATH: NAME -->` or
//! `<!-- checked by PATH: NAME -->`: PATH (from the repository root) is the
//! test or script that finds the block by that marker and runs it as
//! printed, or checks what it says when it cannot be run (a cloud CLI), and
//! must name the marker, the block and the page (see
//! `every_code_block_of_the_docs_is_run_or_names_its_test`).

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

/// Blocks that are documents or output (a config file, a JSON body, a
/// policy, what a command prints): nothing runs them, so they need no test.
const DOCUMENTS: [&str; 4] = ["text", "json", "toml", "hcl"];

/// One fenced block of a page: the line its opening fence is on (from 1),
/// its language (the info string's first word, before any comma; empty
/// when untagged), the rest of the info string's words (`no_run`,
/// `ignore`) and the line above the fence, trimmed.
struct Fence {
    line: usize,
    lang: String,
    attributes: Vec<String>,
    above: String,
}

/// Every fenced block of `text`, indented ones (in a list item) too.
fn fences(name: &str, text: &str) -> Vec<Fence> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if let Some(info) = line.strip_prefix("```") {
            let mut words = info.split(',').map(|w| w.trim().to_string());
            let lang = words.next().unwrap_or_default();
            let above = if i > 0 { lines[i - 1].trim() } else { "" };
            out.push(Fence {
                line: i + 1,
                lang,
                attributes: words.collect(),
                above: above.to_string(),
            });
            let close = (i + 1..lines.len())
                .find(|&j| lines[j].trim() == "```")
                .unwrap_or_else(|| panic!("{name}:{}: a fenced block that never ends", i + 1));
            i = close;
        }
        i += 1;
    }
    out
}

/// `<!-- run by PATH: NAME -->` or `<!-- checked by PATH: NAME -->`: the
/// kind ("run by", "checked by"), PATH (from the repository root) and NAME.
fn test_marker(line: &str) -> Option<(&'static str, &str, &str)> {
    let inner = line.strip_prefix("<!-- ")?.strip_suffix(" -->")?;
    for kind in ["run by", "checked by"] {
        if let Some((path, name)) = inner
            .strip_prefix(kind)
            .and_then(|r| r.strip_prefix(' '))
            .and_then(|r| r.split_once(": "))
        {
            return Some((kind, path, name));
        }
    }
    None
}

/// Whether `word` is in `text` with no letter, digit, `_` or `-` on either
/// side.
fn has_word(text: &str, word: &str) -> bool {
    let part = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    text.match_indices(word).any(|(at, _)| {
        !text[..at].chars().next_back().is_some_and(part)
            && !text[at + word.len()..].chars().next().is_some_and(part)
    })
}

/// Why the block `fence` of `page` (`docs/NAME.md`) is not known to be run
/// or checked, if it is not. `lib_rs` is src/lib.rs (which pages its
/// doctests include).
fn uncovered(page: &str, fence: &Fence, lib_rs: &str) -> Option<String> {
    let lang = fence.lang.as_str();
    if DOCUMENTS.contains(&lang) {
        return None;
    }
    let file = page.strip_prefix("docs/").unwrap();
    let compiled = !fence.attributes.iter().any(|a| a == "ignore");
    if lang == "rust" && compiled && lib_rs.contains(&format!("include_str!(\"../docs/{file}\")")) {
        return None; // a doctest of src/lib.rs
    }
    let above = fence.above.as_str();
    if above.starts_with("<!-- shown from ") {
        return None; // every_block_the_docs_show_from_a_file_is_that_file
    }
    let what = if lang.is_empty() {
        "an untagged block".to_string()
    } else {
        format!("a ```{lang} block")
    };
    let Some((kind, path, name)) = test_marker(above) else {
        return Some(format!(
            "{what} with no `<!-- shown from PATH -->`, `<!-- run by PATH: NAME -->` or `<!-- checked by PATH: NAME -->` on the line above it{}",
            if lang == "rust" {
                " (nor is it a doctest of src/lib.rs: the page is not included, or the block is `ignore`)"
            } else {
                ""
            }
        ));
    };
    let Ok(test) = std::fs::read_to_string(Path::new(ROOT).join(path)) else {
        return Some(format!("`{above}` names {path}, which does not exist"));
    };
    // The test must read this marker of this page: its own kind and path
    // (from which it builds the marker it looks for), the name, the page.
    let prefix = format!("{kind} {path}: ");
    if !test.contains(&prefix) {
        return Some(format!(
            "`{above}`: {path} never builds a marker `{prefix}...`: it does not read the block"
        ));
    }
    if !has_word(&test, name) {
        return Some(format!(
            "`{above}`: {path} never names {name:?}: it does not read this block"
        ));
    }
    if !test.contains(page) {
        return Some(format!(
            "`{above}`: {path} never names {page}: it does not read this page"
        ));
    }
    None
}

/// Every code block of docs/ that a reader could run (shell, C, Go,
/// untagged, Rust outside the doctests) is run or checked by CI, and says
/// by what: a `shown from` marker (the block is a file CI builds and runs),
/// or a `run by PATH: NAME` / `checked by PATH: NAME` marker naming a test
/// (PATH from the repository root) that finds the block by that marker.
/// Documents and output (`text`, `json`, `toml`, `hcl`) need nothing.
#[test]
fn every_code_block_of_the_docs_is_run_or_names_its_test() {
    let lib_rs = std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).unwrap();
    let mut pages: Vec<_> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    let mut problems = Vec::new();
    let mut checked = 0;
    for path in pages {
        let page = path.strip_prefix(ROOT).unwrap().display().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let blocks = fences(&page, &text);
        let mut markers = std::collections::HashSet::new();
        for fence in &blocks {
            checked += 1;
            if let Some(why) = uncovered(&page, fence, &lib_rs) {
                problems.push(format!("{page}:{}: {why}", fence.line));
            }
            if test_marker(&fence.above).is_some() && !markers.insert(fence.above.clone()) {
                problems.push(format!(
                    "{page}:{}: `{}` marks two blocks: a test finds only the first",
                    fence.line, fence.above
                ));
            }
        }
        // A marker with no block under it marks nothing.
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let line = line.trim();
            if (test_marker(line).is_some() || line.starts_with("<!-- shown from "))
                && !lines
                    .get(i + 1)
                    .is_some_and(|l| l.trim().starts_with("```"))
            {
                problems.push(format!(
                    "{page}:{}: `{line}` is not followed by a fenced block",
                    i + 1
                ));
            }
        }
    }
    assert!(checked > 50, "only {checked} blocks found in docs/");
    assert!(
        problems.is_empty(),
        "code blocks of docs/ that no test is known to run or check (add the marker of the test that does, or write one):\n{}",
        problems.join("\n")
    );
}
