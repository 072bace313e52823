//! The configuration reference of the book is what the code says: the page
//! committed in docs/ is the one `slidegate::config::keys::reference`
//! writes from the table of keys the loader, the flags and the reload read.
//! After changing a key, write it again with
//! `SLIDEGATE_BLESS=1 cargo test --test configuration_reference` and commit
//! the page with the change.
#![cfg(feature = "server")]

use std::path::Path;

use slidegate::config::keys::reference::{PAGE, REGENERATE, reference};

#[test]
fn the_configuration_reference_is_what_the_code_says() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    let generated = reference();
    if std::env::var("SLIDEGATE_BLESS").is_ok_and(|value| value == "1") {
        std::fs::create_dir_all(path.parent().expect("a directory")).expect("docs/ is writable");
        std::fs::write(&path, &generated).expect("the page is writable");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == generated {
        return;
    }
    let first = committed
        .lines()
        .zip(generated.lines())
        .position(|(committed, generated)| committed != generated)
        .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
    panic!(
        "{PAGE} is not what the code says (src/config/keys/table.rs); write it again with\n\n    \
         {REGENERATE}\n\nthen review and commit it. First difference, line {}:\n  committed: {:?}\n  \
         generated: {:?}",
        first + 1,
        committed.lines().nth(first).unwrap_or("(end of file)"),
        generated.lines().nth(first).unwrap_or("(end of file)"),
    );
}
