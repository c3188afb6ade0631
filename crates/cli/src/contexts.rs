//! `fleetsync config get-contexts|current-context|use-context|set-context`: the
//! contexts of the config file ([`crate::context`]), read and written as `kubectl
//! config` does. The file is written whole, through a temporary file renamed over it,
//! readable by its owner only (a context may hold a token).

use crate::context::{config_path, load_config, load_config_to_edit, Config, Context};
use crate::output::table;
use anyhow::{anyhow, bail, Context as _, Result};
use fleetsync::args::{ConfigCommand, SetContextArgs};
use fleetsync::outln;
use std::io::Write;

pub fn config(c: ConfigCommand) -> Result<()> {
    match c {
        ConfigCommand::GetContexts => {
            let config = load_config()?;
            let current = config.current_context.as_deref();
            let rows: Vec<Vec<String>> = config
                .contexts
                .iter()
                .map(|c| {
                    let mark = if current == Some(c.name.as_str()) { "*" } else { "" };
                    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
                    vec![mark.into(), c.name.clone(), or_dash(&c.server), or_dash(&c.tenant)]
                })
                .collect();
            Ok(table(&["CURRENT", "NAME", "SERVER", "TENANT"], &rows)?)
        }
        ConfigCommand::CurrentContext => match load_config()?.current_context {
            Some(name) => Ok(outln!("{name}")?),
            None => bail!("no current context is set (fleetsync config use-context NAME)"),
        },
        ConfigCommand::UseContext(a) => {
            let mut config = load_config_to_edit()?;
            if !config.contexts.iter().any(|c| c.name == a.name) {
                let known: Vec<&str> = config.contexts.iter().map(|c| c.name.as_str()).collect();
                bail!("no context named {:?} in the config file (it has: {})", a.name, known.join(", "));
            }
            config.current_context = Some(a.name.clone());
            save(&config)?;
            Ok(outln!("switched to context {:?}", a.name)?)
        }
        ConfigCommand::SetContext(a) => {
            let mut config = load_config_to_edit()?;
            let name = a.name.clone();
            let created = set(&mut config, a)?;
            save(&config)?;
            Ok(outln!("context {name:?} {}", if created { "created" } else { "modified" })?)
        }
    }
}

/// Writes the fields `a` gives into its context (created if missing); whether it was.
fn set(config: &mut Config, a: SetContextArgs) -> Result<bool> {
    if a.name.trim().is_empty() {
        bail!("a context needs a name");
    }
    let at = config.contexts.iter().position(|c| c.name == a.name);
    let created = at.is_none();
    let i = at.unwrap_or_else(|| {
        config.contexts.push(Context { name: a.name.clone(), ..Context::default() });
        config.contexts.len() - 1
    });
    let ctx = &mut config.contexts[i];
    ctx.server = a.server.or(ctx.server.take());
    ctx.tenant = a.tenant.or(ctx.tenant.take());
    ctx.token_file = a.token_file.or(ctx.token_file.take());
    ctx.certificate_authority = a.certificate_authority.or(ctx.certificate_authority.take());
    if a.current {
        config.current_context = Some(a.name);
    }
    Ok(created)
}

/// Writes `config` to the config file, mode 0600, replacing it in one rename.
fn save(config: &Config) -> Result<()> {
    let path = config_path().ok_or_else(|| anyhow!("no config file: set FLEETSYNC_CONFIG or HOME"))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let text = serde_saphyr::to_string(config)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".fleetsync-config")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .tempfile_in(dir)
        .with_context(|| format!("cannot write beside {}", path.display()))?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(&path).map_err(|e| anyhow!("cannot write the config file {}: {}", path.display(), e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(name: &str, server: Option<&str>, tenant: Option<&str>, current: bool) -> SetContextArgs {
        SetContextArgs {
            name: name.into(),
            server: server.map(Into::into),
            tenant: tenant.map(Into::into),
            token_file: None,
            certificate_authority: None,
            current,
        }
    }

    #[test]
    fn set_context_creates_then_changes_only_what_is_given() {
        let mut config = Config::default();
        assert!(set(&mut config, args("prod", Some("https://hub:8443"), Some("team-a"), false)).expect("set"));
        assert_eq!(config.current_context, None);
        assert!(!set(&mut config, args("prod", None, Some("team-b"), true)).expect("set"));
        let prod = &config.contexts[0];
        assert_eq!((prod.server.as_deref(), prod.tenant.as_deref()), (Some("https://hub:8443"), Some("team-b")));
        assert_eq!(config.current_context.as_deref(), Some("prod"));
        let text = serde_saphyr::to_string(&config).expect("yaml");
        assert!(text.contains("current-context: prod") && !text.contains("token:"), "{text}");
        assert!(set(&mut config, args(" ", None, None, false)).is_err());
    }
}
