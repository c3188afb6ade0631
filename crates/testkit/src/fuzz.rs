//! A mutation fuzzer that runs on stable (feature `fuzz`): byte- and token-level
//! mutations of a seed corpus, for as long as `FLEETSYNC_FUZZ_SECONDS` says (default 3;
//! CI runs a minute), replayable with `FLEETSYNC_FUZZ_SEED`. The parser's fuzz test and
//! the apply path's share it.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

/// Fragments that mean something to a YAML scanner.
pub const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ": ",
    ", ",
    "- ",
    "\n",
    "\n  ",
    "---\n",
    "...\n",
    "&a ",
    "*a",
    "<<: *a\n",
    "!!str ",
    "!!binary ",
    "!t ",
    "\"",
    "'",
    "|\n",
    ">-\n",
    "# c\n",
    "? ",
    "~",
    "null",
    ".nan",
    ".inf",
    "-.inf",
    "1e999",
    "0x1F",
    "0o17",
    "-0",
    "1.5e300",
    "\u{feff}",
    "\\u0000",
    "\\x7f",
    "\t",
    "%YAML 1.2\n",
    "yes",
    "\"\\L\"",
    "apiVersion: fleetsync.io/v1\n",
    "kind: SyncSet\n",
    "kind: Cluster\n",
    "kind: Secret\n",
    "metadata: {name: n}\n",
    "spec: {clusterNames: [a], resources: []}\n",
];

/// A fuzz run: its random source, its corpus and its time budget.
pub struct Fuzz {
    pub rng: StdRng,
    pub corpus: Vec<String>,
    /// The seed that replays this run (`FLEETSYNC_FUZZ_SEED`).
    pub seed: u64,
    pub seconds: u64,
    stop: Instant,
}

impl Fuzz {
    /// A run over `seeds`, for `FLEETSYNC_FUZZ_SECONDS` (default 3).
    pub fn new(seeds: Vec<String>) -> Fuzz {
        assert!(!seeds.is_empty(), "a fuzz run needs seeds");
        let seconds: u64 = std::env::var("FLEETSYNC_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
        let seed: u64 =
            std::env::var("FLEETSYNC_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
        // Shown with a failing test's output: the same inputs come again with this seed.
        eprintln!(
            "fuzz: {seconds}s from seed {seed} (replay: FLEETSYNC_FUZZ_SEED={seed} FLEETSYNC_FUZZ_SECONDS={seconds})"
        );
        Fuzz {
            rng: StdRng::seed_from_u64(seed),
            corpus: seeds,
            seed,
            seconds,
            stop: Instant::now() + Duration::from_secs(seconds),
        }
    }

    /// The next input (a mutation of a corpus entry), or `None` once the time is up.
    pub fn next_input(&mut self) -> Option<String> {
        if Instant::now() >= self.stop {
            return None;
        }
        let base = self.corpus[self.rng.random_range(0..self.corpus.len())].as_bytes().to_vec();
        Some(String::from_utf8_lossy(&mutate(&mut self.rng, &base, &self.corpus)).into_owned())
    }

    /// Keeps an accepted input to mutate from (a bounded corpus of small inputs).
    pub fn keep(&mut self, input: String) {
        if self.corpus.len() < 512 && input.len() < 64 * 1024 {
            self.corpus.push(input);
        }
    }
}

/// Where tokens start: at every change between letters/digits and anything else.
fn token_bounds(b: &[u8]) -> Vec<usize> {
    let mut out = vec![0];
    for i in 1..b.len() {
        if b[i].is_ascii_alphanumeric() != b[i - 1].is_ascii_alphanumeric() || !b[i].is_ascii_alphanumeric() {
            out.push(i);
        }
    }
    out.push(b.len());
    out
}

/// `input` with one to four mutations.
pub fn mutate(rng: &mut StdRng, input: &[u8], corpus: &[String]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = b.len();
        let at = if len == 0 { 0 } else { rng.random_range(0..=len) };
        match rng.random_range(0..9) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                b[i] ^= 1 << rng.random_range(0..8);
            }
            1 => b.insert(at, rng.random()),
            2 if len > 0 => {
                let end = (at + rng.random_range(1..16)).min(len);
                b.drain(at.min(end)..end);
            }
            3 => {
                let t = TOKENS[rng.random_range(0..TOKENS.len())];
                b.splice(at..at, t.bytes());
            }
            4 if len > 0 => {
                // Duplicate a range (repeats structure, anchors, documents).
                let from = rng.random_range(0..len);
                let end = (from + rng.random_range(1..256)).min(len);
                let piece = b[from..end].to_vec();
                b.splice(at..at, piece);
            }
            5 => {
                // Swap two tokens.
                let bounds = token_bounds(&b);
                if bounds.len() > 3 {
                    let i = rng.random_range(0..bounds.len() - 1);
                    let j = rng.random_range(0..bounds.len() - 1);
                    let (i, j) = (i.min(j), i.max(j));
                    if i < j && bounds[i + 1] <= bounds[j] {
                        let first = b[bounds[i]..bounds[i + 1]].to_vec();
                        let second = b[bounds[j]..bounds[j + 1]].to_vec();
                        b.splice(bounds[j]..bounds[j + 1], first);
                        b.splice(bounds[i]..bounds[i + 1], second);
                    }
                }
            }
            6 => {
                // Delete or repeat a token.
                let bounds = token_bounds(&b);
                if bounds.len() > 2 {
                    let i = rng.random_range(0..bounds.len() - 1);
                    let tok = b[bounds[i]..bounds[i + 1]].to_vec();
                    if rng.random() {
                        b.drain(bounds[i]..bounds[i + 1]);
                    } else {
                        let n = rng.random_range(1..64);
                        b.splice(bounds[i]..bounds[i], tok.repeat(n));
                    }
                }
            }
            7 => {
                // Splice in part of another seed.
                let other = corpus[rng.random_range(0..corpus.len())].as_bytes();
                if !other.is_empty() {
                    let from = rng.random_range(0..other.len());
                    let end = (from + rng.random_range(1..512)).min(other.len());
                    b.splice(at..at, other[from..end].iter().copied());
                }
            }
            _ => {
                // Replace a byte with a structural one.
                if len > 0 {
                    let i = rng.random_range(0..len);
                    b[i] = b"{}[],:-&*!|>'\"#\n "[rng.random_range(0..17)];
                }
            }
        }
    }
    b
}
