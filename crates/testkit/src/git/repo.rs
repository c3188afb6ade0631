//! Repositories the tests commit to with the `git` command, as a fleet team would.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A repository with a work tree, at `ROOT/NAME.git`'s side: `ROOT/NAME` is the work
/// tree and its `.git` is what a server serves (`ROOT/NAME/.git`).
pub struct Repo {
    pub dir: PathBuf,
}

impl Repo {
    /// A new repository `name` under `root`, on branch `main`.
    pub fn new(root: &Path, name: &str) -> Repo {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).expect("the repository's directory");
        let repo = Repo { dir };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    /// `file://…` of this repository.
    pub fn file_url(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    /// Runs `git` in the work tree; what it printed.
    pub fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=fleet", "-c", "user.email=fleet@example.invalid", "-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("run git");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Writes files (creating directories) and commits them all; the commit's id.
    pub fn commit(&self, files: &[(&str, &[u8])], message: &str) -> String {
        for (path, content) in files {
            let path = self.dir.join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("directories");
            std::fs::write(path, content).expect("write a file");
        }
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.head()
    }

    pub fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"])
    }

    /// Commits `count` files of `path_of(i)` with a small content each, through `git
    /// fast-import` (fast for many files); the commit's id.
    pub fn commit_many(&self, count: usize, path_of: impl Fn(usize) -> String) -> String {
        let mut stream =
            String::from("commit refs/heads/main\ncommitter fleet <fleet@example.invalid> 1800000000 +0000\n");
        stream.push_str("data 4\nmany\nfrom refs/heads/main^0\n");
        for i in 0..count {
            let content = format!("n: {i}\n");
            stream.push_str(&format!("M 100644 inline {}\ndata {}\n{content}\n", path_of(i), content.len()));
        }
        let mut child = Command::new("git")
            .args(["fast-import", "--quiet"])
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("git fast-import");
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(stream.as_bytes()).expect("the stream");
        assert!(child.wait().expect("fast-import").success(), "fast-import failed");
        self.git(&["reset", "-q", "--hard", "main"]);
        self.head()
    }
}
