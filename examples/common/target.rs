//! A named endpoint on a benchmark's command line (`--target NAME=HOST:PORT`),
//! shared by the benchmark programs.

#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub addr: String,
}

/// Parses `NAME=HOST:PORT`.
pub fn parse_target(s: &str) -> Result<Target, String> {
    let (name, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=HOST:PORT"))?;
    if name.is_empty() || !addr.contains(':') {
        return Err(format!("`{s}` is not NAME=HOST:PORT"));
    }
    Ok(Target {
        name: name.to_owned(),
        addr: addr.to_owned(),
    })
}
