//! Chapter 4: a byte-level BPE tokenizer for the gym's text, with special
//! tokens for the chat roles and the call tags.
//!
//! Training, encoding and decoding are done by Hugging Face's `tokenizers`
//! crate; this module fixes the settings (byte-level pre-tokenizer and
//! decoder, no prefix space, our special tokens) and wraps the few calls the
//! book needs. [`render`] writes a transcript in the book's chat format, the
//! text that TinyAgent is pretrained on.

use crate::episode::Owner;
use std::path::Path;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{
    AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer, TokenizerImpl,
};

/// Pieces that merges never cross: a word with the space before it, or a run
/// of spaces. Unlike GPT-2's pattern, letters, digits and punctuation are not
/// separated, so an op name such as `swap_minmax` can become one token.
pub const PIECES: &str = r" ?\S+|\s+(?!\S)|\s+";

// ANCHOR: special
/// Padding, the end of an episode, the three roles and the two call tags.
pub const SPECIAL: [&str; 7] = [
    "<|pad|>",
    "<|end|>",
    "<|issue|>",
    "<|assistant|>",
    "<|tool|>",
    "<call>",
    "</call>",
];

/// The ids of the special tokens (they come first, so `pad` is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Specials {
    pub pad: u32,
    pub end: u32,
    pub issue: u32,
    pub assistant: u32,
    pub tool: u32,
    pub call: u32,
    pub close: u32,
}

/// The role token that opens a message of `owner`.
pub fn role_token(owner: Owner) -> &'static str {
    match owner {
        Owner::Prompt => SPECIAL[2],
        Owner::Policy => SPECIAL[3],
        Owner::Env => SPECIAL[4],
    }
}

/// A transcript in the chat format: each message after its role token, and
/// `<|end|>` after the last one.
pub fn render(transcript: &[(Owner, String)]) -> String {
    let mut text: String = transcript
        .iter()
        .map(|(owner, message)| format!("{}{message}", role_token(*owner)))
        .collect();
    text.push_str(SPECIAL[1]);
    text
}
// ANCHOR_END: special

/// A trained byte-level BPE.
#[derive(Clone)]
pub struct Bpe {
    inner: Tokenizer,
    pub special: Specials,
}

// ANCHOR: train
impl Bpe {
    /// Learn `vocab_size` tokens (special tokens and the 256 byte symbols
    /// included) from `texts`. Deterministic: ties between merges are broken by
    /// the pair itself, not by hash order.
    pub fn train<I: Iterator<Item = String> + Send>(
        texts: I,
        vocab_size: usize,
    ) -> Result<Bpe, String> {
        let mut trainer = BpeTrainerBuilder::new()
            .vocab_size(vocab_size)
            .min_frequency(2)
            .show_progress(false)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .special_tokens(
                SPECIAL
                    .iter()
                    .map(|token| AddedToken::from(token.to_string(), true))
                    .collect(),
            )
            .build();
        // Split into pieces, then map bytes to symbols: any text encodes, and no prefix space is invented.
        let pieces = Split::new(
            SplitPattern::Regex(PIECES.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .expect("PIECES is a valid pattern");
        let byte_level = ByteLevel::new(false, true, false);
        let pre = Sequence::new(vec![
            PreTokenizerWrapper::Split(pieces),
            PreTokenizerWrapper::ByteLevel(byte_level),
        ]);
        let mut tokenizer: TokenizerImpl<
            BPE,
            NormalizerWrapper,
            Sequence,
            PostProcessorWrapper,
            ByteLevel,
        > = TokenizerImpl::new(BPE::default());
        tokenizer
            .with_pre_tokenizer(Some(pre))
            .with_decoder(Some(byte_level));
        tokenizer
            .train(&mut trainer, texts)
            .map_err(|err| format!("BPE training failed: {err}"))?;
        tokenizer
            .add_special_tokens(
                SPECIAL
                    .iter()
                    .map(|token| AddedToken::from(token.to_string(), true)),
            )
            .map_err(|err| format!("cannot add the special tokens: {err}"))?;
        Bpe::wrap(Tokenizer::from(tokenizer))
    }
    // ANCHOR_END: train

    fn wrap(inner: Tokenizer) -> Result<Bpe, String> {
        let id = |token: &str| {
            inner
                .token_to_id(token)
                .ok_or_else(|| format!("the tokenizer has no special token {token}"))
        };
        let special = Specials {
            pad: id(SPECIAL[0])?,
            end: id(SPECIAL[1])?,
            issue: id(SPECIAL[2])?,
            assistant: id(SPECIAL[3])?,
            tool: id(SPECIAL[4])?,
            call: id(SPECIAL[5])?,
            close: id(SPECIAL[6])?,
        };
        Ok(Bpe { inner, special })
    }

    /// The tokenizer as JSON (the format every `tokenizers` binding reads).
    pub fn to_json(&self) -> String {
        self.inner.to_string(true).expect("a tokenizer serialises")
    }

    pub fn from_json(json: &str) -> Result<Bpe, String> {
        Bpe::wrap(
            json.parse::<Tokenizer>()
                .map_err(|err| format!("not a tokenizer: {err}"))?,
        )
    }

    pub fn save(&self, path: &Path) -> Result<(), String> {
        std::fs::write(path, self.to_json())
            .map_err(|err| format!("cannot write {}: {err}", path.display()))
    }

    pub fn load(path: &Path) -> Result<Bpe, String> {
        let json = std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        Bpe::from_json(&json)
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Token ids of `text`; special tokens in the text become their ids.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.inner
            .encode_fast(text, false)
            .expect("byte-level BPE encodes any text")
            .get_ids()
            .to_vec()
    }

    /// The text of `ids` (special tokens included).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.inner
            .decode(ids, false)
            .expect("ids come from this tokenizer")
    }

    /// One token as text, for display: `Ġ` marks a leading space, `Ċ` a newline.
    pub fn token(&self, id: u32) -> String {
        self.inner
            .id_to_token(id)
            .unwrap_or_else(|| format!("<{id}?>"))
    }

    pub fn id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    // ANCHOR: encode_transcript
    /// The ids of `render(transcript)` and who wrote each one. The policy owns
    /// only the tokens of its messages; the `<|assistant|>` that invites it to
    /// speak belongs to the message before, and `<|end|>` to the environment.
    pub fn encode_transcript(&self, transcript: &[(Owner, String)]) -> (Vec<u32>, Vec<Owner>) {
        let (mut ids, mut owners) = (Vec::new(), Vec::new());
        for (i, (owner, message)) in transcript.iter().enumerate() {
            let role_owner = match owner {
                Owner::Policy => transcript[i.saturating_sub(1)].0,
                other => *other,
            };
            ids.push(
                self.id(role_token(*owner))
                    .expect("role tokens are special tokens"),
            );
            owners.push(role_owner);
            let body = self.encode(message);
            owners.extend(std::iter::repeat_n(*owner, body.len()));
            ids.extend(body);
        }
        ids.push(self.special.end);
        owners.push(Owner::Env);
        (ids, owners)
    }
    // ANCHOR_END: encode_transcript
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript() -> Vec<(Owner, String)> {
        vec![
            (
                Owner::Prompt,
                "clamp(3, 0, 5) returns 0.\nOps: swap_minmax, guard_public.".into(),
            ),
            (Owner::Policy, "<call> edit swap_minmax </call>".into()),
            (Owner::Env, "edited with swap_minmax".into()),
            (Owner::Policy, "<call> submit </call>".into()),
            (Owner::Env, "submitted".into()),
        ]
    }

    fn trained() -> Bpe {
        let texts: Vec<String> = (0..50).map(|_| render(&transcript())).collect();
        Bpe::train(texts.into_iter(), 300).unwrap()
    }

    #[test]
    fn special_tokens_come_first_and_round_trips_are_exact() {
        let bpe = trained();
        assert_eq!(bpe.special.pad, 0);
        assert_eq!(SPECIAL.map(|t| bpe.id(t).unwrap()), [0, 1, 2, 3, 4, 5, 6]);
        for text in [
            render(&transcript()),
            "unseen text: ünïcödé, tabs\tand  spaces\n".to_string(),
        ] {
            assert_eq!(bpe.decode(&bpe.encode(&text)), text);
        }
        // An op name the corpus repeats is one token.
        let ids = bpe.encode("<call> edit swap_minmax </call>");
        let op = bpe
            .id("Ġswap_minmax")
            .expect("the op name is in the vocabulary");
        assert!(
            ids.contains(&op),
            "{:?}",
            ids.iter().map(|&i| bpe.token(i)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn encoding_by_message_equals_encoding_the_rendered_text() {
        let bpe = trained();
        let (ids, owners) = bpe.encode_transcript(&transcript());
        assert_eq!(ids, bpe.encode(&render(&transcript())));
        let policy: Vec<u32> = ids
            .iter()
            .zip(&owners)
            .filter(|(_, o)| **o == Owner::Policy)
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(
            bpe.decode(&policy),
            "<call> edit swap_minmax </call><call> submit </call>"
        );
    }

    #[test]
    fn training_is_deterministic_and_json_round_trips() {
        let (a, b) = (trained(), trained());
        assert_eq!(a.to_json(), b.to_json());
        let again = Bpe::from_json(&a.to_json()).unwrap();
        assert_eq!(
            again.encode(&render(&transcript())),
            a.encode(&render(&transcript()))
        );
        assert!(Bpe::from_json("{}").is_err());
    }
}
