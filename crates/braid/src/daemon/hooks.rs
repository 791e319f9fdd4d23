//! wg-quick's `PreUp`, `PostUp`, `PreDown` and `PostDown` hooks: run by the
//! daemon on the way up, and on the way down by the daemon or, once it has
//! dropped root, by its [`guardian`](super::guardian).

/// Runs wg-quick style hooks (`%i` is the interface name).
pub fn run_hooks(name: &str, hooks: &[String]) -> std::io::Result<()> {
    for hook in hooks {
        let cmd = hook.replace("%i", name);
        let status = std::process::Command::new("bash")
            .arg("-c")
            .arg(&cmd)
            .status()?;
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "hook `{cmd}` failed with {status}"
            )));
        }
    }
    Ok(())
}
