//! A bounded, uninstrumented fuzzer for CI: it mutates the named seeds at random and runs
//! each result through its target. It has no coverage feedback, so it finds less per second
//! than libFuzzer; what it buys is that every CI run tries new inputs without the 14-minute
//! sanitizer build `cargo fuzz` needs (fuzz/README.md).

use milvus_sim::fixtures::rng::SplitMix64;

/// Tokens the grammars are built from, so a mutation can make a structure and not only
/// break one. Read from `dict/*.dict` (libFuzzer's format, which `cargo fuzz` takes too).
pub fn dictionary() -> Vec<Vec<u8>> {
    let mut tokens = Vec::new();
    for name in ["toml.dict", "json.dict", "yaml.dict"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("dict")
            .join(name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        tokens.extend(text.lines().filter_map(token));
    }
    tokens
}

/// One dictionary line, `name="value"` or `"value"`, with `\\`, `\"` and `\xNN` escapes.
fn token(line: &str) -> Option<Vec<u8>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let quoted = &line[line.find('"')? + 1..line.rfind('"')?];
    let mut out = Vec::new();
    let mut bytes = quoted.bytes();
    while let Some(b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match bytes.next()? {
            b'x' => {
                let hex = [bytes.next()?, bytes.next()?];
                out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// Draws mutated inputs from a pool of seeds.
pub struct Mutator {
    rng: SplitMix64,
    seeds: Vec<Vec<u8>>,
    dictionary: Vec<Vec<u8>>,
}

impl Mutator {
    pub fn new(seed: u64, seeds: Vec<Vec<u8>>, dictionary: Vec<Vec<u8>>) -> Self {
        assert!(!seeds.is_empty(), "a mutator needs at least one seed");
        Self {
            rng: SplitMix64::new(seed),
            seeds,
            dictionary,
        }
    }

    fn below(&mut self, bound: usize) -> usize {
        draw(&mut self.rng, bound)
    }

    /// A seed with one to eight mutations applied.
    pub fn next_input(&mut self) -> Vec<u8> {
        let mut data = self.seeds[draw(&mut self.rng, self.seeds.len())].clone();
        for _ in 0..=self.below(8) {
            self.mutate(&mut data);
        }
        data
    }

    fn mutate(&mut self, data: &mut Vec<u8>) {
        let at = self.below(data.len() + 1);
        match self.below(7) {
            // Flip a bit.
            0 if !data.is_empty() => {
                let i = self.below(data.len());
                data[i] ^= 1 << self.below(8);
            }
            // A byte parsers treat specially.
            1 if !data.is_empty() => {
                const SPECIAL: &[u8] = b"\0\n\r\t \"'\\=[]{},.:-+#0189eE\x7f\xff";
                let i = self.below(data.len());
                data[i] = SPECIAL[self.below(SPECIAL.len())];
            }
            // Delete a range.
            2 => {
                let len = self.below(data.len() - at + 1).min(64);
                data.drain(at..at + len);
            }
            // Repeat a range.
            3 => {
                let len = self.below(data.len() - at + 1).min(64);
                let copy = data[at..at + len].to_vec();
                data.splice(at..at, copy);
            }
            // A dictionary token.
            4 if !self.dictionary.is_empty() => {
                let token = self.dictionary[draw(&mut self.rng, self.dictionary.len())].clone();
                data.splice(at..at, token);
            }
            // A piece of another seed, spliced in.
            5 => {
                let rng = &mut self.rng;
                let other = &self.seeds[draw(rng, self.seeds.len())];
                let from = draw(rng, other.len());
                let len = draw(rng, other.len() - from + 1).min(256);
                let piece = other[from..from + len].to_vec();
                data.splice(at..at, piece);
            }
            // Cut the input short.
            _ => data.truncate(at),
        }
    }
}

/// A value in `0..bound`, or 0 when `bound` is 0.
fn draw(rng: &mut SplitMix64, bound: usize) -> usize {
    rng.below(bound.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_lines_unescape() {
        assert_eq!(token(r#"kw_true="true""#), Some(b"true".to_vec()));
        assert_eq!(token(r#""\x00\"\\""#), Some(b"\0\"\\".to_vec()));
        assert_eq!(token("# a comment"), None);
        assert!(dictionary().len() > 20);
    }

    /// The mutator reaches an input its seeds are far from, so a CI run that finds nothing
    /// has looked.
    #[test]
    fn finds_a_planted_fault() {
        let seeds = vec![b"[restore]\nname = \"a\"\n".to_vec()];
        let mut mutator = Mutator::new(7, seeds, dictionary());
        let found = (0..200_000).any(|_| {
            let input = mutator.next_input();
            input.windows(2).any(|w| w == b"]]") && input.contains(&0)
        });
        assert!(
            found,
            "200,000 mutations never made `]]` and a NUL together"
        );
    }
}
