//! Chapter 13: trajectories on disk, one JSON object per line (JSONL), so
//! that episodes played here can be read by another trainer and episodes
//! played elsewhere can be trained on here. A line holds the token stream as
//! the policy saw and wrote it, the action mask, the sampling log-probs, the
//! reward and the outcome, the group it belongs to, the tokenizer, template
//! and sampling settings that produced it, and the policy version of every
//! action token; reading checks every invariant the training loop relies on
//! and names the line that breaks one.

use crate::book::{fnv1a, FNV_START};
use crate::episode::Owner;
use crate::gym::Info;
use crate::tinyagent::Sampling;
use crate::tokenizer::{render, Bpe};
use crate::trajectory::Trajectory;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::Path;

/// The format's name and version, the first field of every line.
pub const FORMAT: &str = "agentrl-trajectory/2";

// ANCHOR: line
/// What produced a run's token streams and log-probs, the same for every
/// line it writes: a trainer must tokenize, template and score with the same
/// or its log-probs are of another policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The tokenizer: its kind, size and a fingerprint of its tokens in id order.
    pub tokenizer: String,
    /// The chat template: a fingerprint of the role tokens around a message of each owner.
    pub template: String,
    /// The sampling settings the log-probs were drawn under, and the cap on an action's tokens.
    pub sampling: Sampling,
    pub max_action_tokens: usize,
}

/// One trajectory as a line of the file. `ids`, `action_mask` and `logprobs`
/// have one entry per token, `action_versions` one per action token;
/// `prompt_len` tokens come before the first action token (the prompt as a
/// trainer that splits prompt and response sees it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub format: String,
    /// The task's index in the split it came from, and its id.
    pub task: usize,
    pub task_id: String,
    /// The group the episode was played in: the episodes of one draw of a
    /// task in one iteration share it, and two draws of one task do not.
    pub group: usize,
    /// Learner updates made before the oldest weights that sampled any of
    /// its action tokens (the learner's version minus this is its lag).
    pub policy_version: usize,
    pub provenance: Provenance,
    pub ids: Vec<u32>,
    /// 1 where the policy sampled the token, 0 for prompt and tool output.
    pub action_mask: Vec<u8>,
    /// The sampling log-prob of each action token; 0 elsewhere.
    pub logprobs: Vec<f64>,
    /// The policy version that sampled each action token, in order (they
    /// differ within an episode when weights change between its turns).
    pub action_versions: Vec<usize>,
    pub prompt_len: usize,
    pub reward: f64,
    pub info: Info,
}
// ANCHOR_END: line

impl Provenance {
    /// The provenance of episodes `bpe` tokenized and a policy sampled with
    /// `sampling` and at most `max_action_tokens` per action.
    pub fn new(bpe: &Bpe, sampling: Sampling, max_action_tokens: usize) -> Provenance {
        let n = bpe.vocab_size();
        let tokens = (0..n as u32).fold(FNV_START, |h, id| {
            fnv1a(bpe.token(id).as_bytes(), fnv1a(&[0xff], h))
        });
        let roles = render(&[
            (Owner::Prompt, "p".into()),
            (Owner::Policy, "a".into()),
            (Owner::Env, "o".into()),
        ]);
        Provenance {
            tokenizer: format!("byte-level BPE, {n} tokens, {tokens:016x}"),
            template: format!("agentrl roles, {:016x}", fnv1a(roles.as_bytes(), FNV_START)),
            sampling,
            max_action_tokens,
        }
    }
}

impl Line {
    /// A trajectory of `group`, every action token sampled by `policy_version`.
    pub fn new(
        trajectory: &Trajectory,
        task_id: &str,
        group: usize,
        policy_version: usize,
        provenance: &Provenance,
    ) -> Line {
        let action_mask: Vec<u8> = trajectory
            .action_mask()
            .iter()
            .map(|&m| u8::from(m))
            .collect();
        let prompt_len = action_mask
            .iter()
            .position(|&m| m == 1)
            .unwrap_or(action_mask.len());
        let actions = action_mask.iter().filter(|&&m| m == 1).count();
        Line {
            format: FORMAT.into(),
            task: trajectory.task,
            task_id: task_id.into(),
            group,
            policy_version,
            provenance: provenance.clone(),
            ids: trajectory.ids.clone(),
            action_mask,
            logprobs: trajectory.logprobs.clone(),
            action_versions: vec![policy_version; actions],
            prompt_len,
            reward: trajectory.reward,
            info: trajectory.info,
        }
    }

    /// TRL's `env_mask` for a `rollout_func` (one entry per completion id,
    /// that is per id after the prompt): 1 on the model's tokens, 0 on tool
    /// output, which TRL otherwise trains on as if the model had written it.
    pub fn trl_env_mask(&self) -> Vec<u8> {
        self.action_mask[self.prompt_len..].to_vec()
    }

    /// The line as it is written, without its newline (not checked).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a line serialises")
    }

    /// Every invariant the loop relies on, or what breaks first.
    pub fn check(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!("format is {:?}, expected {FORMAT:?}", self.format));
        }
        let n = self.ids.len();
        if self.action_mask.len() != n || self.logprobs.len() != n {
            return Err(format!(
                "{n} ids but {} mask entries and {} log-probs",
                self.action_mask.len(),
                self.logprobs.len()
            ));
        }
        if let Some(i) = self.action_mask.iter().position(|&m| m > 1) {
            return Err(format!(
                "action_mask[{i}] is {}, expected 0 or 1",
                self.action_mask[i]
            ));
        }
        for (i, (&m, &lp)) in self.action_mask.iter().zip(&self.logprobs).enumerate() {
            if m == 1 && !(lp <= 0.0 && lp.is_finite()) {
                return Err(format!("logprobs[{i}] = {lp} on an action token: a log-probability is finite and at most 0"));
            }
            if m == 0 && lp != 0.0 {
                return Err(format!(
                    "logprobs[{i}] = {lp} on a token the policy did not sample (expected 0)"
                ));
            }
        }
        let first = self.action_mask.iter().position(|&m| m == 1).unwrap_or(n);
        if self.prompt_len != first {
            return Err(format!(
                "prompt_len is {} but the first action token is at {first}",
                self.prompt_len
            ));
        }
        if !self.reward.is_finite() {
            return Err(format!("reward is {}", self.reward));
        }
        let actions = self.action_mask.iter().filter(|&&m| m == 1).count();
        if self.action_versions.len() != actions {
            return Err(format!(
                "{actions} action tokens but {} action_versions",
                self.action_versions.len()
            ));
        }
        if let Some(&oldest) = self.action_versions.iter().min() {
            if oldest != self.policy_version {
                return Err(format!(
                    "policy_version is {} but the oldest action token's version is {oldest}",
                    self.policy_version
                ));
            }
        }
        let sampling = self.provenance.sampling;
        if !(sampling.temperature > 0.0 && sampling.top_p > 0.0 && sampling.top_p <= 1.0) {
            return Err(format!(
                "sampling at temperature {} and top_p {}: log-probs of a sampled policy need a temperature above 0 and top_p in (0, 1]",
                sampling.temperature, sampling.top_p
            ));
        }
        Ok(())
    }

    /// Back to a trajectory of the loop.
    pub fn trajectory(&self) -> Trajectory {
        let owners = self
            .action_mask
            .iter()
            .enumerate()
            .map(|(i, &m)| {
                if m == 1 {
                    Owner::Policy
                } else if i < self.prompt_len {
                    Owner::Prompt
                } else {
                    Owner::Env
                }
            })
            .collect();
        Trajectory {
            task: self.task,
            ids: self.ids.clone(),
            owners,
            logprobs: self.logprobs.clone(),
            reward: self.reward,
            info: self.info,
        }
    }
}

// ANCHOR: io
/// Write `lines` to `path`, one JSON object per line.
pub fn write_jsonl(path: &Path, lines: &[Line]) -> Result<(), String> {
    let file = std::fs::File::create(path)
        .map_err(|err| format!("cannot create {}: {err}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for line in lines {
        line.check()?;
        writeln!(out, "{}", line.to_json())
            .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    }
    out.flush()
        .map_err(|err| format!("cannot write {}: {err}", path.display()))
}

/// Read a file that [`write_jsonl`] (or another program) wrote; the first
/// line that does not parse or breaks an invariant is an error naming it.
pub fn read_jsonl(path: &Path) -> Result<Vec<Line>, String> {
    let file = std::fs::File::open(path)
        .map_err(|err| format!("cannot open {}: {err}", path.display()))?;
    let mut lines = Vec::new();
    for (number, text) in std::io::BufReader::new(file).lines().enumerate() {
        let text = text
            .map_err(|err| format!("{}: cannot read line {}: {err}", path.display(), number + 1))?;
        if text.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(&text)
            .map_err(|err| format!("{} line {}: {err}", path.display(), number + 1))?;
        line.check()
            .map_err(|err| format!("{} line {}: {err}", path.display(), number + 1))?;
        lines.push(line);
    }
    Ok(lines)
}
// ANCHOR_END: io

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Trajectory {
        let owners = [
            Owner::Prompt,
            Owner::Prompt,
            Owner::Policy,
            Owner::Policy,
            Owner::Env,
            Owner::Policy,
            Owner::Env,
        ];
        Trajectory {
            task: 3,
            ids: vec![5, 6, 7, 8, 9, 10, 2],
            owners: owners.to_vec(),
            logprobs: vec![0.0, 0.0, -0.1234567890123, -2.5e-9, 0.0, -7.0, 0.0],
            reward: 1.0,
            info: Info {
                submitted: true,
                public_pass: true,
                hidden_pass: true,
                ..Info::default()
            },
        }
    }

    fn provenance() -> Provenance {
        Provenance {
            tokenizer: "byte-level BPE, 11 tokens, 0123456789abcdef".into(),
            template: "agentrl roles, fedcba9876543210".into(),
            sampling: Sampling::PURE,
            max_action_tokens: 16,
        }
    }

    #[test]
    fn a_trajectory_survives_the_round_trip_bit_for_bit() {
        let dir = std::env::temp_dir().join(format!("agentrl-exchange-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("episodes.jsonl");
        let line = Line::new(&sample(), "clamp-3", 7, 4, &provenance());
        assert_eq!(line.prompt_len, 2);
        assert_eq!(
            (line.group, line.action_versions.clone()),
            (7, vec![4, 4, 4])
        );
        assert_eq!(line.trl_env_mask(), vec![1, 1, 0, 1, 0]);
        write_jsonl(&path, &[line.clone(), line.clone()]).unwrap();
        let back = read_jsonl(&path).unwrap();
        assert_eq!(back, vec![line.clone(), line]);
        assert_eq!(back[0].trajectory(), sample());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn provenance_names_the_tokenizer_by_its_tokens_and_keeps_the_sampling() {
        let texts = |extra: &str| {
            let mut texts: Vec<String> = (0..40)
                .map(|i| format!("edit swap_{i} then test"))
                .collect();
            texts.push(extra.to_string());
            texts
        };
        let bpe = Bpe::train(texts("").into_iter(), 300).unwrap();
        let again = Bpe::train(texts("").into_iter(), 300).unwrap();
        let other = Bpe::train(texts("submit submit submit submit").into_iter(), 300).unwrap();
        let a = Provenance::new(&bpe, Sampling::PURE, 16);
        assert_eq!(a, Provenance::new(&again, Sampling::PURE, 16));
        let named = format!("byte-level BPE, {} tokens, ", bpe.vocab_size());
        assert!(a.tokenizer.starts_with(&named), "{}", a.tokenizer);
        assert_ne!(
            a.tokenizer,
            Provenance::new(&other, Sampling::PURE, 16).tokenizer
        );
        let hot = Sampling {
            temperature: 0.7,
            top_p: 0.9,
        };
        let b = Provenance::new(&bpe, hot, 8);
        assert_eq!(
            (b.template.clone(), b.sampling, b.max_action_tokens),
            (a.template, hot, 8)
        );
    }

    #[test]
    fn a_broken_line_is_named_with_what_breaks() {
        let dir = std::env::temp_dir().join(format!("agentrl-exchange-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.jsonl");
        let good =
            serde_json::to_string(&Line::new(&sample(), "clamp-3", 0, 2, &provenance())).unwrap();
        let mut bad = Line::new(&sample(), "clamp-3", 0, 2, &provenance());
        bad.logprobs[3] = 0.5;
        let cases = [
            (
                serde_json::to_string(&bad).unwrap(),
                "logprobs[3] = 0.5 on an action token",
            ),
            (
                good.replace("\"prompt_len\":2", "\"prompt_len\":1"),
                "prompt_len is 1 but the first action token is at 2",
            ),
            (
                good.replace("\"action_mask\":[0,0,1", "\"action_mask\":[0,0,2"),
                "action_mask[2] is 2",
            ),
            (
                good.replace("agentrl-trajectory/2", "other/9"),
                "expected \"agentrl-trajectory/2\"",
            ),
            (
                good.replace("\"action_versions\":[2,2,2]", "\"action_versions\":[2,2]"),
                "3 action tokens but 2 action_versions",
            ),
            (
                good.replace("\"action_versions\":[2,2,2]", "\"action_versions\":[2,1,2]"),
                "policy_version is 2 but the oldest action token's version is 1",
            ),
            (
                good.replace("\"temperature\":1.0", "\"temperature\":0.0"),
                "sampling at temperature 0",
            ),
            ("{not json".to_string(), "line 2: key must be a string"),
        ];
        for (text, expected) in cases {
            std::fs::write(&path, format!("{good}\n{text}\n")).unwrap();
            let err = read_jsonl(&path).unwrap_err();
            assert!(err.contains("line 2") && err.contains(expected), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
