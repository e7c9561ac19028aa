//! Chapter 4: the policy interface that later chapters use. Context tokens
//! go in; for each context come out the action's tokens, their sampling
//! log-probabilities, the decoded text and the parsed call.

use crate::episode::{parse_call, Call};
use crate::tinyagent::{KvCache, Sampling, TinyAgent};
use crate::tokenizer::Bpe;
use rand::rngs::StdRng;

// ANCHOR: action
/// One sampled action.
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    /// The ids as sampled, the closing `</call>` included when it was drawn.
    pub tokens: Vec<u32>,
    /// log π of each token under the sampling distribution.
    pub logprobs: Vec<f64>,
    pub text: String,
    /// `None` when the text is not exactly one call.
    pub call: Option<Call>,
}

/// A language model with its tokenizer, acting as a policy.
pub struct LmPolicy<'a> {
    pub model: &'a TinyAgent,
    pub bpe: &'a Bpe,
    pub sampling: Sampling,
    /// An action ends at `</call>` or after this many tokens.
    pub max_action_tokens: usize,
}

impl LmPolicy<'_> {
    /// One action per context, all generated in one batch. A context longer
    /// than the model's window keeps its last tokens.
    pub fn act(&self, contexts: &[Vec<u32>], rng: &mut StdRng) -> Vec<Action> {
        self.act_cached(contexts, &mut KvCache::default(), rng)
    }

    /// [`act`](Self::act), reusing `cache` when every context extends the
    /// tokens the cache holds for its row (the same conversation one turn
    /// later) and fits the window: then only the new tokens are fed. Otherwise
    /// the cache is rebuilt from the (clipped) contexts. Either way the model
    /// sees the same tokens at the same positions.
    pub fn act_cached(
        &self,
        contexts: &[Vec<u32>],
        cache: &mut KvCache,
        rng: &mut StdRng,
    ) -> Vec<Action> {
        let room = self.model.config.n_ctx as usize - self.max_action_tokens;
        let extends = cache.tokens.len() == contexts.len()
            && contexts
                .iter()
                .zip(&cache.tokens)
                .all(|(c, held)| c.len() <= room && c.len() > held.len() && c.starts_with(held));
        let new: Vec<Vec<u32>> = if extends {
            contexts
                .iter()
                .zip(&cache.tokens)
                .map(|(c, held)| c[held.len()..].to_vec())
                .collect()
        } else {
            *cache = KvCache::default();
            contexts
                .iter()
                .map(|c| c[c.len().saturating_sub(room)..].to_vec())
                .collect()
        };
        let stop = [self.bpe.special.close, self.bpe.special.end];
        let generated = self.model.generate_from(
            cache,
            &new,
            self.max_action_tokens,
            &stop,
            self.sampling,
            rng,
        );
        generated
            .into_iter()
            .map(|g| {
                let text = self.bpe.decode(&g.tokens);
                Action {
                    call: parse_call(&text),
                    text,
                    tokens: g.tokens,
                    logprobs: g.logprobs,
                }
            })
            .collect()
    }
}
// ANCHOR_END: action
