//! The book in `docs/` and the README hold together: every internal link
//! and anchor resolves (anchors computed from the headings as mdBook
//! computes them, and checked against the ids of a real `mdbook build`),
//! every entry of `SUMMARY.md` has its file and every page is listed,
//! every `{{#include}}` finds its file and anchor, the README's library
//! lines are the compiled example's, and the README and the performance
//! page stay within the lengths the project promises.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use common::tools;

/// Pages generated from the code by their own tests, which the book must
/// list: their anchors are checked like any other page's.
const GENERATED_PAGES: [&str; 3] = [
    "docs/src/reference/configuration.md",
    "docs/src/reference/metrics.md",
    "docs/src/operations/when-a-node-goes-away.md",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// Every `.md` file under `dir`, as paths relative to the repository.
fn pages(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                found.push(path.strip_prefix(root()).unwrap().to_path_buf());
            }
        }
    }
    found.sort();
    found
}

/// The lines of `text` outside fenced code blocks, with their numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<String> = None;
    let mut lines = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        match &fence {
            Some(open) if marker.len() >= open.len() && marker.starts_with(&open[..1]) => {
                if trimmed[marker.len()..].trim().is_empty() {
                    fence = None;
                }
            }
            Some(_) => {}
            None if marker.len() >= 3 => fence = Some(marker),
            None => lines.push((number + 1, line)),
        }
    }
    lines
}

/// `line` without its inline code spans (a link in code is not a link).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + ticks..];
        let closing = "`".repeat(ticks);
        match after.find(&closing) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links and images of one line, and of a
/// reference definition (`[label]: target`).
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut targets = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(end) = trimmed.find("]:")
        && !trimmed[..end].contains("](")
        && let Some(target) = trimmed[end + 2..].split_whitespace().next()
    {
        targets.push(target.trim_matches(['<', '>']).to_owned());
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 0;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = i;
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let inside = after[..end].trim();
        if let Some(target) = inside.split_whitespace().next() {
            targets.push(target.trim_matches(['<', '>']).to_owned());
        }
        rest = &after[end.min(after.len())..];
    }
    targets
}

/// A heading's text as mdBook renders it: code spans keep their content,
/// links their text, emphasis markers go.
fn heading_text(heading: &str) -> String {
    let mut text = String::new();
    let mut chars = heading.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' | '*' => {}
            '[' => {}
            ']' if chars.peek() == Some(&'(') => {
                // Skip the link's target.
                for c in chars.by_ref() {
                    if c == ')' {
                        break;
                    }
                }
            }
            ']' => {}
            _ => text.push(c),
        }
    }
    text
}

/// mdBook's anchor of a heading (`normalize_id`): letters and digits
/// lower-cased, `_` and `-` kept, whitespace turned into `-`, the rest
/// dropped.
fn anchor_of(text: &str) -> String {
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a page's headings, a repeated one suffixed `-1`, `-2`,
/// ... as mdBook does.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let anchor = anchor_of(&heading_text(line[hashes..].trim()));
        let count = seen.entry(anchor.clone()).or_insert(0);
        anchors.insert(if *count == 0 {
            anchor
        } else {
            format!("{anchor}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with the links of `page` (relative to the repository),
/// its text given.
fn broken_links(page: &Path, text: &str) -> Vec<String> {
    let in_book = page.starts_with("docs/src");
    let mut broken = Vec::new();
    for (number, line) in prose_lines(text) {
        for target in link_targets(line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let at = format!("{}:{number}: {target}", page.display());
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if file.is_empty() {
                page.to_path_buf()
            } else {
                normalize(&page.parent().unwrap().join(file))
            };
            if in_book && !file.starts_with("docs/src") {
                broken.push(format!(
                    "{at}: outside docs/src, the built book has no such page \
                     (name the file in code instead)"
                ));
                continue;
            }
            let path = root().join(&file);
            if !path.exists() {
                broken.push(format!("{at}: no file {}", file.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if file.extension().is_some_and(|ext| ext == "md") {
                let found = if file == page {
                    anchors(text)
                } else {
                    anchors(&read(&path))
                };
                if !found.contains(anchor) {
                    broken.push(format!(
                        "{at}: no heading with anchor #{anchor} in {}",
                        file.display()
                    ));
                }
            }
        }
    }
    broken
}

/// What is wrong with the `{{#include FILE[:ANCHOR]}}` lines of a page.
fn broken_includes(page: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let Some(start) = line.find("{{#include ") else {
            continue;
        };
        let spec = &line[start + "{{#include ".len()..];
        let spec = spec[..spec.find("}}").unwrap_or(spec.len())].trim();
        // FILE, FILE:ANCHOR, or FILE:FROM:TO with line numbers.
        let mut parts = spec.split(':');
        let file = parts.next().unwrap_or_default();
        let rest: Vec<&str> = parts.collect();
        let anchor = match rest.as_slice() {
            [anchor] if !anchor.chars().all(|c| c.is_ascii_digit()) => Some(*anchor),
            _ => None,
        };
        let path = root().join(normalize(&page.parent().unwrap().join(file)));
        let at = format!("{}:{}: {spec}", page.display(), number + 1);
        match std::fs::read_to_string(&path) {
            Err(error) => broken.push(format!("{at}: {error}")),
            Ok(included) => {
                if let Some(anchor) = anchor
                    && included_lines(&included, anchor).is_none()
                {
                    broken.push(format!("{at}: no ANCHOR: {anchor} in {}", path.display()));
                }
            }
        }
    }
    broken
}

/// The lines between `ANCHOR: name` and `ANCHOR_END: name`, dedented as
/// mdBook dedents them.
fn included_lines(text: &str, name: &str) -> Option<Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|line| line.trim_end().ends_with(&format!("ANCHOR: {name}")))?;
    let end = lines
        .iter()
        .position(|line| line.trim_end().ends_with(&format!("ANCHOR_END: {name}")))?;
    let inner = &lines[start + 1..end];
    let indent = inner
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.len() - line.trim_start().len())
        .min()
        .unwrap_or(0);
    Some(
        inner
            .iter()
            .map(|line| line.get(indent..).unwrap_or("").to_owned())
            .collect(),
    )
}

/// The README and every page of the book.
fn documents() -> Vec<PathBuf> {
    let mut documents = vec![PathBuf::from("README.md")];
    documents.extend(pages(&root().join("docs/src")));
    documents
}

#[test]
fn every_internal_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for page in documents() {
        let text = read(&root().join(&page));
        broken.extend(broken_links(&page, &text));
        broken.extend(broken_includes(&page, &text));
    }
    assert!(broken.is_empty(), "broken:\n{}", broken.join("\n"));
}

#[test]
fn every_summary_entry_has_its_file_and_every_page_is_listed() {
    let summary = read(&root().join("docs/src/SUMMARY.md"));
    let mut listed = BTreeSet::new();
    let mut missing = Vec::new();
    for (_, line) in prose_lines(&summary) {
        for target in link_targets(line) {
            let file = normalize(&Path::new("docs/src").join(&target));
            if !root().join(&file).is_file() {
                missing.push(target.clone());
            }
            listed.insert(file);
        }
    }
    assert!(
        missing.is_empty(),
        "SUMMARY.md lists missing files: {missing:?}"
    );
    let unlisted: Vec<PathBuf> = pages(&root().join("docs/src"))
        .into_iter()
        .filter(|page| !page.ends_with("SUMMARY.md") && !listed.contains(page))
        .collect();
    assert!(unlisted.is_empty(), "pages not in SUMMARY.md: {unlisted:?}");
    for page in GENERATED_PAGES {
        assert!(listed.contains(Path::new(page)), "{page} not in SUMMARY.md");
    }
}

/// The checker itself: each kind of breakage is found, and a sound page
/// passes.
#[test]
fn the_checker_finds_each_kind_of_broken_link() {
    let page = Path::new("docs/src/guide/http-api.md");
    let sound = "# The HTTP API\n\n## Forward-auth (`GET /v1/auth`)\n\n\
                 [up](#forward-auth-get-v1auth) [policies](policies.md)\n\
                 ```sh\n[not a link](nowhere.md)\n```\n";
    assert_eq!(broken_links(page, sound), Vec::<String>::new());
    for bad in [
        "[x](#no-such-heading)",
        "[x](no-such-page.md)",
        "[x](policies.md#no-such-heading)",
        "[x](../../../examples/proxies/nginx.conf)",
        "[x](../reference/metrics.md#no-such-family)",
        "[x]: policies.md#nowhere",
    ] {
        let text = format!("# The HTTP API\n\n{bad}\n");
        assert_eq!(broken_links(page, &text).len(), 1, "{bad}");
    }
    assert_eq!(
        anchors("# A\n## Try it\n## Try it\n### `memcached.servers`, and `*.x`\n"),
        ["a", "try-it", "try-it-1", "memcachedservers-and-x"]
            .into_iter()
            .map(str::to_owned)
            .collect()
    );
}

#[test]
fn the_readme_library_lines_are_the_compiled_example() {
    let readme = read(&root().join("README.md"));
    let start = readme.find("```rust\n").expect("the README's rust block") + "```rust\n".len();
    let block: Vec<&str> = readme[start..start + readme[start..].find("```").unwrap()]
        .lines()
        .collect();
    let example = read(&root().join("examples/quickstart.rs"));
    let compiled = included_lines(&example, "ten_lines").expect("ANCHOR: ten_lines");
    assert_eq!(block, compiled, "README.md and examples/quickstart.rs");
    let code = block.iter().filter(|line| !line.trim().is_empty()).count();
    assert!(code <= 12, "the library in ten lines: {code}");
}

#[test]
fn the_readme_and_the_performance_page_keep_their_lengths() {
    let readme = read(&root().join("README.md"));
    assert!(readme.lines().count() <= 150, "README.md over 150 lines");
    let performance = read(&root().join("docs/src/performance.md"));
    assert!(
        performance.lines().count() <= 250,
        "docs/src/performance.md over 250 lines"
    );
    // No dated sections: git history keeps the diary.
    let dated: Vec<&str> = performance
        .lines()
        .filter(|line| line.starts_with('#') && line.contains("20") && line.contains('-'))
        .filter(|line| {
            line.split(|c: char| !c.is_ascii_digit() && c != '-')
                .any(|word| word.len() == 10 && word.as_bytes()[4] == b'-')
        })
        .collect();
    assert!(dated.is_empty(), "dated headings: {dated:?}");
}

/// A real `mdbook build` of `docs/`, and every anchor the checker above
/// computes is an id the built page has.
#[test]
fn mdbook_builds_the_book_with_the_anchors_the_checker_computes() {
    let test = "mdbook_builds_the_book_with_the_anchors_the_checker_computes";
    let Some(mdbook) = tools::require(test, "mdbook", tools::mdbook()) else {
        return;
    };
    let out = common::process::temp_dir("slidegate-book");
    let output = Command::new(&mdbook)
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(&out)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "mdbook build failed:\n{said}");
    assert!(
        !said.contains("WARN") && !said.contains("ERROR"),
        "mdbook build warned:\n{said}"
    );
    for page in pages(&root().join("docs/src")) {
        if page.ends_with("SUMMARY.md") {
            continue;
        }
        let html_path = out
            .join(page.strip_prefix("docs/src").unwrap())
            .with_extension("html");
        let html = read(&html_path);
        let ids: BTreeSet<String> = html
            .split("id=\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_owned)
            .collect();
        let computed = anchors(&read(&root().join(&page)));
        let unknown: Vec<&String> = computed.difference(&ids).collect();
        assert!(
            unknown.is_empty(),
            "{}: anchors computed but not in the built page: {unknown:?}",
            page.display()
        );
    }
}

/// The testing chapter names every file and directory under `tests/`, and
/// every file in those directories but their `main.rs`.
#[test]
fn the_testing_chapter_lists_every_test_file() {
    let chapter = read(&root().join("docs/src/contributing/testing.md"));
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("tests")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !chapter.contains(&format!("`{name}/`")) {
                missing.push(format!("tests/{name}/"));
            }
            for inner in std::fs::read_dir(&path).unwrap() {
                let inner = inner.unwrap().file_name().to_string_lossy().into_owned();
                let named = chapter.contains(&format!("`{inner}`"))
                    || chapter.contains(&format!("`{inner}/`"))
                    || chapter.contains(&format!("`{name}/{inner}/`"));
                if inner != "main.rs" && !named {
                    missing.push(format!("tests/{name}/{inner}"));
                }
            }
        } else if !chapter.contains(&format!("`{name}`")) {
            missing.push(format!("tests/{name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/src/contributing/testing.md does not name {missing:?}"
    );
}
