//! The READMEs' walkthroughs as a reader runs them (issue 51): the fenced `sh` blocks of the
//! repository's READMEs, split into commands and run through `sh -c` with the suite's
//! `lockstep` first on `PATH`. What a test must change in a command to run it here (an
//! address, a path, `cargo run -p lockstep --` for the binary already built) is named in
//! the test, and each change must find its text: a README that stops saying what a test
//! changes fails that test rather than running something else.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context as _, bail, ensure};

/// A fenced `sh` block of a README.
#[derive(Debug, Clone)]
pub struct Block {
    /// Its file, relative to the repository's top.
    pub file: &'static str,
    /// The line of its opening fence (1-based).
    pub line: usize,
    /// Its commands in order: a line ending in `\` joined to the next, blank lines and
    /// comment lines left out.
    pub commands: Vec<String>,
}

impl Block {
    /// Its `n`th command.
    pub fn command(&self, n: usize) -> anyhow::Result<&str> {
        self.commands
            .get(n)
            .map(String::as_str)
            .with_context(|| format!("{}:{} has no command {n}: {self:?}", self.file, self.line))
    }
}

/// The repository's top folder.
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `sh` block of `file` (relative to the repository's top).
pub fn blocks(file: &'static str) -> anyhow::Result<Vec<Block>> {
    let text = std::fs::read_to_string(repository().join(file))
        .with_context(|| format!("reading {file}"))?;
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Vec<&str>)> = None;
    for (i, line) in text.lines().enumerate() {
        match (&mut open, line.trim_start().strip_prefix("```")) {
            (None, Some(info)) if info.trim() == "sh" => open = Some((i + 1, Vec::new())),
            // Any other fenced block (toml, a bare fence) is skipped whole.
            (None, Some(_)) => open = Some((0, Vec::new())),
            (Some((start, lines)), Some(_)) => {
                if *start > 0 {
                    blocks.push(Block {
                        file,
                        line: *start,
                        commands: commands(lines),
                    });
                }
                open = None;
            }
            (Some((_, lines)), None) => lines.push(line),
            (None, None) => {}
        }
    }
    ensure!(open.is_none(), "{file}: a fenced block is not closed");
    Ok(blocks)
}

/// The lines of a block as commands: a command goes on past a line that ends in `\` or
/// inside a quote.
fn commands(lines: &[&str]) -> Vec<String> {
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in lines {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        current.push_str(line);
        if let Some(joined) = current.strip_suffix('\\') {
            current = format!("{joined} ");
        } else if open_quote(&current) {
            current.push('\n');
        } else {
            commands.push(std::mem::take(&mut current));
        }
    }
    commands
}

/// Whether `command` ends inside a quote, as sh reads it: `'…'` holds anything, `"…"` and
/// the bare text take `\` as an escape, and a `#` beginning a word comments out the rest
/// of its line.
fn open_quote(command: &str) -> bool {
    let mut quote = None;
    let mut chars = command.chars();
    let mut word_start = true;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') | (Some('"'), '"') => quote = None,
            (Some('"') | None, '\\') => {
                chars.next();
            }
            (None, '\'' | '"') => quote = Some(c),
            (None, '#') if word_start => {
                // To the end of the line.
                chars.by_ref().find(|&c| c == '\n');
                word_start = true;
                continue;
            }
            _ => {}
        }
        word_start = quote.is_none() && c.is_whitespace();
    }
    quote.is_some()
}

/// The one block of `file` whose first command starts with `start`.
pub fn block(file: &'static str, start: &str) -> anyhow::Result<Block> {
    let mut found = blocks(file)?
        .into_iter()
        .filter(|b| b.commands.first().is_some_and(|c| c.starts_with(start)));
    let block = found
        .next()
        .with_context(|| format!("{file} has no sh block beginning {start:?}"))?;
    ensure!(
        found.next().is_none(),
        "{file} has more than one sh block beginning {start:?}"
    );
    Ok(block)
}

/// `command` with each `(from, to)` made in turn; every `from` must be there.
pub fn edit(command: &str, edits: &[(&str, &str)]) -> anyhow::Result<String> {
    let mut edited = command.to_owned();
    for (from, to) in edits {
        if !edited.contains(from) {
            bail!("the README's command no longer says {from:?}: {command}");
        }
        edited = edited.replace(from, to);
    }
    Ok(edited)
}

/// What README writes for "the lockstep binary" before the build is done.
pub const CARGO_RUN: (&str, &str) = ("cargo run -p lockstep --", "lockstep");

/// `command` as a shell in `dir` runs it, `lockstep` being the suite's binary; output piped,
/// killed on drop.
pub fn sh(dir: &Path, command: &str) -> anyhow::Result<tokio::process::Command> {
    let lockstep = crate::lockstep_bin();
    let bin = lockstep
        .parent()
        .context("the lockstep binary's folder")?
        .to_owned();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&path)))?;
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    Ok(cmd)
}

/// [`sh`] for one simple command that runs until stopped (`watch`, `serve`): the shell
/// becomes the command, so a signal sent to the child reaches it (a reader's Ctrl-C).
pub fn exec(dir: &Path, command: &str) -> anyhow::Result<tokio::process::Command> {
    sh(dir, &format!("exec {command}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_split_into_commands_with_continuations_joined() {
        let lines = [
            "# a comment",
            "",
            "export A=$(openssl rand -hex 32)",
            "lockstep serve --listen 0.0.0.0:8443 \\",
            "    --token-env A     # the token",
        ];
        assert_eq!(
            commands(&lines),
            [
                "export A=$(openssl rand -hex 32)",
                "lockstep serve --listen 0.0.0.0:8443      --token-env A     # the token",
            ]
        );
    }

    #[test]
    fn a_quote_holds_a_command_across_lines() {
        let lines = [
            "curl -d '{\"a\": 1,",
            "   \"b\": 2}'   # it's a comment",
            "echo \"done\"",
        ];
        assert_eq!(
            commands(&lines),
            [
                "curl -d '{\"a\": 1,\n   \"b\": 2}'   # it's a comment",
                "echo \"done\"",
            ]
        );
    }

    #[test]
    fn an_edit_that_finds_nothing_is_an_error() {
        assert_eq!(
            edit("cargo run -p lockstep -- demo", &[CARGO_RUN]).unwrap(),
            "lockstep demo"
        );
        let err = edit("lockstep demo", &[CARGO_RUN]).unwrap_err().to_string();
        assert!(err.contains("no longer says"), "{err}");
    }
}
