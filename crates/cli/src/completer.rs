//! Completion of object names from the hub: `fleetsync get clusters eu-<TAB>` asks the
//! hub of the current context for the names that start with what was typed.
//!
//! The shell scripts of `fleetsync completion SHELL` are clap_complete's dynamic ones:
//! the shell runs `fleetsync` itself (with `COMPLETE=SHELL`) for each completion, and
//! clap_complete answers from the command's own definition, calling
//! [`object_names`] for the name arguments. What the line says so far (the verb, the
//! kind, `-n`, `--context`, `--server`) is read by parsing the words before the cursor;
//! the hub is asked by the [`Lister`] the binary registers ([`set_lister`]), since the
//! contexts and the client live there. Any failure (no hub, no credential, a slow
//! answer) completes nothing, quietly.

use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};
use std::ffi::OsStr;
use std::sync::OnceLock;

/// Lists the names of the objects the command line `words` (its words before the one
/// being completed, then a placeholder for it) is about, that start with `prefix`.
pub type Lister = fn(words: &[String], prefix: &str) -> Vec<String>;

static LISTER: OnceLock<Lister> = OnceLock::new();

/// What a name argument is completed from (set once, by the binary, before it parses).
pub fn set_lister(lister: Lister) {
    let _ = LISTER.set(lister);
}

/// The placeholder the word being completed is parsed as.
pub const PLACEHOLDER: &str = "__fleetsync_completing__";

/// The completer of an argument that names an object of the hub.
pub fn object_names() -> ArgValueCompleter {
    ArgValueCompleter::new(complete)
}

fn complete(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(lister) = LISTER.get() else {
        return Vec::new();
    };
    let prefix = current.to_string_lossy();
    let index = std::env::var("_CLAP_COMPLETE_INDEX").ok().and_then(|i| i.parse().ok());
    let words = words_before_cursor(std::env::args().collect(), index);
    lister(&words, &prefix).into_iter().filter(|n| n.starts_with(&*prefix)).map(CompletionCandidate::new).collect()
}

/// The words of the line being completed, as the shell passed them after `--`, up to
/// the cursor (`index`, as bash and zsh tell it; else the last word), the word at the
/// cursor replaced by [`PLACEHOLDER`].
pub fn words_before_cursor(args: Vec<String>, index: Option<usize>) -> Vec<String> {
    let Some(dash) = args.iter().position(|a| a == "--") else {
        return Vec::new();
    };
    let mut words: Vec<String> = args.into_iter().skip(dash + 1).collect();
    let at = index.unwrap_or(words.len().saturating_sub(1)).min(words.len());
    words.truncate(at);
    words.push(PLACEHOLDER.to_string());
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn the_word_at_the_cursor_is_the_placeholder() {
        let args = strings(&["fleetsync", "--", "fleetsync", "get", "clusters", "eu", "-n", "t"]);
        assert_eq!(words_before_cursor(args.clone(), Some(3)), strings(&["fleetsync", "get", "clusters", PLACEHOLDER]));
        // Fish cuts the line at the cursor: the last word is the one being completed.
        assert_eq!(
            words_before_cursor(args, None),
            strings(&["fleetsync", "get", "clusters", "eu", "-n", PLACEHOLDER])
        );
        assert!(words_before_cursor(strings(&["fleetsync", "get"]), None).is_empty(), "no `--`: not completing");
    }
}
