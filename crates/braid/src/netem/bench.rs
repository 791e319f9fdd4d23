pub fn run(_a: &[String]) -> Result<(), String> {
    Ok(())
}
