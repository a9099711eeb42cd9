//! The module graph against the layering written in `docs::development`: a module of
//! `src/` imports only from layers below its own, and the files of a folder import each
//! other without a circle. Read from the source's `crate::` and `super::` paths (comments
//! and unit-test modules left out), so a new import against the layers fails here, not in
//! a review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// The layers table of `src/docs/development.md`: each top-level module's layer.
fn layers() -> BTreeMap<String, usize> {
    let doc = std::fs::read_to_string(source_root().join("docs/development.md")).unwrap();
    let table = doc
        .split("<!-- layers: checked by tests/it/layering.rs -->")
        .nth(1)
        .and_then(|rest| rest.split("```text\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("development.md has the layers table");
    let mut layers = BTreeMap::new();
    for line in table.lines() {
        let mut words = line.split_whitespace();
        let Some(Ok(layer)) = words.next().map(str::parse::<usize>) else {
            continue; // a continued description
        };
        // The module names run until the description, two spaces or more away.
        let names = line.trim_start()[layer.to_string().len()..].trim_start();
        let names = names.split("  ").next().unwrap();
        for name in names.split_whitespace() {
            layers.insert(name.to_owned(), layer);
        }
    }
    layers
}

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every module of `src/` with its source, unit-test modules left out.
fn modules() -> BTreeMap<Module, String> {
    fn walk(dir: &Path, modules: &mut BTreeMap<Module, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, modules);
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs")
                || path.file_name().is_some_and(|name| name == "tests.rs")
            {
                continue;
            }
            let relative = path.strip_prefix(source_root()).unwrap().with_extension("");
            let mut module: Module = relative
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap()
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            modules.insert(module, text);
        }
    }
    let mut modules = BTreeMap::new();
    walk(&source_root(), &mut modules);
    modules
}

/// The paths a use tree names, `a::{b, c::{d}}` as `a::b` and `a::c::d`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (at, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|part| !part.trim().is_empty())
        .flat_map(|part| {
            expand(part)
                .into_iter()
                .map(move |path| format!("{prefix}{path}"))
        })
        .collect()
}

/// The modules `module` (whose source is `text`) imports, resolved against `known`.
fn imports(module: &Module, text: &str, known: &BTreeSet<Module>) -> BTreeSet<Module> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find(['c', 's']) {
        let here = &rest[at..];
        let boundary = !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let (base, tail) = if boundary && here.starts_with("crate::") {
            (Vec::new(), &here["crate::".len()..])
        } else if boundary && here.starts_with("super::") {
            let mut tail = here;
            let mut base = module.clone();
            while let Some(next) = tail.strip_prefix("super::") {
                base.pop();
                tail = next;
            }
            (base, tail)
        } else {
            rest = &rest[at + 1..];
            continue;
        };
        // The path runs to the end of its use tree: through braces, to `;`, `)` or space.
        let (mut depth, mut end) = (0, tail.len());
        for (offset, ch) in tail.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' if depth > 0 => depth -= 1,
                _ if depth == 0 && !(ch.is_alphanumeric() || ch == '_' || ch == ':') => {
                    end = offset;
                    break;
                }
                _ => {}
            }
        }
        for path in expand(&tail[..end]) {
            let mut target = base.clone();
            target.extend(
                path.split("::")
                    .filter(|part| !part.is_empty() && *part != "self")
                    .map(str::to_owned),
            );
            while !target.is_empty() && !known.contains(&target) {
                target.pop();
            }
            if !target.is_empty() && !module.starts_with(&target) {
                found.insert(target);
            }
        }
        rest = &tail[end..];
    }
    found
}

/// The import graph of `src/`.
fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let modules = modules();
    let known: BTreeSet<Module> = modules.keys().cloned().collect();
    modules
        .iter()
        .map(|(module, text)| (module.clone(), imports(module, text, &known)))
        .collect()
}

/// Inside the crate an item is named through its module, never through a re-export at the
/// crate root (`crate::StoreError`): the layers test reads module paths, and a root path
/// would hide which layer an item comes from.
#[test]
fn no_item_is_reached_through_the_crate_root() {
    let mut through_root = Vec::new();
    for (module, text) in modules() {
        if module.is_empty() {
            continue; // lib.rs itself
        }
        for line in text.lines() {
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                if rest.starts_with(|c: char| c.is_ascii_uppercase()) {
                    through_root.push(format!("{}: {}", module.join("::"), line.trim()));
                }
            }
        }
    }
    assert!(
        through_root.is_empty(),
        "items named through the crate root:\n{}",
        through_root.join("\n")
    );
}

#[test]
fn every_import_points_to_a_lower_layer() {
    let layers = layers();
    let mut against = Vec::new();
    for (module, targets) in graph() {
        let Some(from) = module.first() else { continue };
        let from_layer = *layers
            .get(from)
            .unwrap_or_else(|| panic!("`{from}` is in no layer of docs::development"));
        for target in targets {
            let to = &target[0];
            if to == from {
                continue;
            }
            let to_layer = *layers
                .get(to)
                .unwrap_or_else(|| panic!("`{to}` is in no layer of docs::development"));
            if to_layer >= from_layer {
                against.push(format!("{} -> {}", module.join("::"), target.join("::")));
            }
        }
    }
    assert!(
        against.is_empty(),
        "imports against the layers:\n{}",
        against.join("\n")
    );
}

#[test]
fn the_files_of_a_folder_import_each_other_without_a_circle() {
    let graph = graph();
    // For each folder, the graph between its children (a child stands for its subtree).
    let folders: BTreeSet<Module> = graph
        .keys()
        .filter(|module| !module.is_empty())
        .map(|module| module[..module.len() - 1].to_vec())
        .collect();
    let mut circles = Vec::new();
    for folder in folders {
        let depth = folder.len();
        let child = |module: &Module| {
            (module.len() > depth && module.starts_with(&folder)).then(|| module[depth].clone())
        };
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, targets) in &graph {
            let Some(from) = child(module) else { continue };
            for to in targets.iter().filter_map(child).filter(|to| *to != from) {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
        // A circle is an edge whose target reaches back to its source.
        for (from, targets) in &edges {
            for to in targets {
                let (mut seen, mut stack) = (BTreeSet::new(), vec![to.clone()]);
                while let Some(next) = stack.pop() {
                    if next == *from {
                        circles.push(format!(
                            "{}: {from} -> {to} -> ... -> {from}",
                            folder.join("/")
                        ));
                        break;
                    }
                    if seen.insert(next.clone()) {
                        stack.extend(edges.get(&next).into_iter().flatten().cloned());
                    }
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_checker_sees_imports_through_groups_and_super() {
    let known: BTreeSet<Module> = [
        vec!["store"],
        vec!["api"],
        vec!["api", "body"],
        vec!["api", "auth"],
    ]
    .into_iter()
    .map(|module| module.into_iter().map(str::to_owned).collect())
    .collect();
    let module: Module = vec!["api".to_owned(), "auth".to_owned()];
    let found = imports(
        &module,
        "use crate::{store::StoreError, api::body::ApiBody};\nlet x = super::body::X;",
        &known,
    );
    let expected: BTreeSet<Module> = [vec!["store"], vec!["api", "body"]]
        .into_iter()
        .map(|module| module.into_iter().map(str::to_owned).collect())
        .collect();
    assert_eq!(found, expected);
}
