//! The README's crate table matches the Cargo workspace: one row per member (and the root `om4`),
//! no other rows, and each row's "depends on" cell names exactly the crate's om4-* dependencies.

use std::collections::BTreeSet;
use std::path::Path;

fn manifest(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The om4-* crates named in `sections` of a manifest (the crate itself excluded).
fn om4_deps(manifest: &toml::Table, sections: &[&str]) -> BTreeSet<String> {
    let tables = sections.iter().filter_map(|s| manifest.get(*s).and_then(|d| d.as_table()));
    tables.flat_map(|t| t.keys()).filter(|k| k.starts_with("om4-")).cloned().collect()
}

/// The om4-* crate names written in a table cell.
fn om4_names(cell: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, _) in cell.match_indices("om4-") {
        let name: String = cell[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
        names.insert(name);
    }
    names
}

#[test]
fn readme_crate_table_matches_the_workspace() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = manifest(&root.join("Cargo.toml"));
    let members = cargo["workspace"]["members"].as_array().expect("[workspace] members is a list");
    let mut expected: Vec<String> = members.iter().map(|m| m.as_str().unwrap().to_string()).collect();
    expected.push("om4".into());

    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    // Rows of the crate table: `| `crate` | job | depends on |`.
    let rows: Vec<(String, String)> = readme
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
            assert!(cells.len() >= 3, "README crate row has fewer than 3 cells: {line}");
            (cells[0].split('`').nth(1).unwrap_or(cells[0]).to_string(), cells[cells.len() - 1].to_string())
        })
        .collect();

    for crate_path in &expected {
        let n = rows.iter().filter(|(c, _)| c == crate_path).count();
        assert_eq!(n, 1, "README's crate table must have exactly one row for `{crate_path}`, has {n}");
    }
    for (c, _) in &rows {
        assert!(expected.contains(c), "README's crate table has a row for `{c}`, which is not a workspace crate");
    }

    for (crate_path, cell) in &rows {
        let (path, sections): (_, &[&str]) = match crate_path.as_str() {
            "om4" => (root.join("Cargo.toml"), &["dependencies", "dev-dependencies"]),
            member => (root.join(member).join("Cargo.toml"), &["dependencies"]),
        };
        let actual = om4_deps(&manifest(&path), sections);
        let named = om4_names(cell);
        assert_eq!(
            named,
            actual,
            "README's \"depends on\" for `{crate_path}` names {named:?}, but {} has {actual:?} in {sections:?}",
            path.display()
        );
    }
}
