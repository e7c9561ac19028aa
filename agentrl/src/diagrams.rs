//! Chapter 1: Figure 1.2, the agentic RL loop and the token strip.
//!
//! [`agentic_rl_loop`] draws the whole chapter on one canvas. Top left, the
//! rollout: the policy writes action tokens, the parser turns them into a
//! tool call, the environment answers with observation tokens, and the
//! context grows into the next prompt. Top right, the learning side: the
//! finished trajectory is scored by hidden tests, turned into advantages
//! against a baseline, and used for a policy update that only counts the
//! policy's own tokens. Bottom, the token strip makes that last point
//! concrete: one box per word of a real transcript, styled by who wrote it,
//! with the loss mask (1 for policy words, 0 otherwise) underneath.
//!
//! Everything is placed by hand on a fixed pixel grid, so the figure is the
//! same bytes on every machine (see [`crate::plot`] for why the text is too).

use crate::episode::Owner;
use crate::plot::{FONT, GREY, INK, PALETTE};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error;
use std::path::Path;

/// Width and height of Figure 1.2 in SVG pixels.
pub const FIGURE_SIZE: (u32, u32) = (960, 560);

pub(crate) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
pub(crate) type Drawn = Result<(), Box<dyn Error>>;

// The figure's colours, taken from the chart palette so that "policy" is the
// same blue here and in every data figure.
const POLICY_BLUE: RGBColor = PALETTE[0];
const LEARN_ORANGE: RGBColor = PALETTE[1];
const POLICY_TINT: RGBColor = RGBColor(222, 236, 246);
const LEARN_TINT: RGBColor = RGBColor(253, 241, 214);
pub(crate) const PANEL_FILL: RGBColor = RGBColor(248, 248, 248);
const PANEL_EDGE: RGBColor = RGBColor(208, 208, 208);
const PROMPT_EDGE: RGBColor = RGBColor(150, 150, 150);
pub(crate) const ARROW: RGBColor = RGBColor(70, 70, 70);

// ANCHOR: agentic_rl_loop
/// Draw Figure 1.2 to `path` as SVG; `strip` is an episode transcript whose
/// words become the token strip. Errors name the path.
pub fn agentic_rl_loop(path: &Path, strip: &[(Owner, String)]) -> Result<(), String> {
    write_svg(path, agentic_rl_loop_svg(strip))
}
// ANCHOR_END: agentic_rl_loop

/// Figure 1.2 as an SVG document (drawn in memory, so a failure never
/// leaves a half-written file).
pub fn agentic_rl_loop_svg(strip: &[(Owner, String)]) -> Result<String, String> {
    let boxes = strip_layout(strip)?;
    render_svg(FIGURE_SIZE, |root| draw_figure(root, &boxes))
}

/// Draw on a fresh canvas of `size` pixels and return the SVG document.
pub(crate) fn render_svg(
    size: (u32, u32),
    draw: impl FnOnce(&Area) -> Drawn,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root).map_err(|err| err.to_string())?;
        root.present().map_err(|err| err.to_string())?;
    }
    Ok(svg)
}

/// Write a drawn SVG document to `path`; errors name the path.
pub(crate) fn write_svg(path: &Path, svg: Result<String, String>) -> Result<(), String> {
    let svg = svg.map_err(|err| format!("cannot draw figure {}: {err}", path.display()))?;
    std::fs::write(path, svg)
        .map_err(|err| format!("cannot write figure {}: {err}", path.display()))
}

fn draw_figure(root: &Area, boxes: &[TokenBox]) -> Drawn {
    root.fill(&WHITE)?;
    draw_rollout(root)?;
    draw_learning(root)?;
    draw_links(root)?;
    draw_strip(root, boxes)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Geometry and drawing helpers.

/// An axis-aligned box in pixels: top-left corner, width, height.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) x: i32,
    pub(crate) y: i32,
    pub(crate) w: i32,
    pub(crate) h: i32,
}

impl Frame {
    pub(crate) const fn new(x: i32, y: i32, w: i32, h: i32) -> Self {
        Frame { x, y, w, h }
    }
    pub(crate) fn right(&self) -> i32 {
        self.x + self.w
    }
    pub(crate) fn bottom(&self) -> i32 {
        self.y + self.h
    }
    pub(crate) fn centre_x(&self) -> i32 {
        self.x + self.w / 2
    }
    pub(crate) fn centre_y(&self) -> i32 {
        self.y + self.h / 2
    }
    fn corners(&self) -> [(i32, i32); 2] {
        [(self.x, self.y), (self.right(), self.bottom())]
    }
}

/// A font of the figure. Sizes are in plotters units, which the SVG backend
/// divides by 1.24, so 16 here is about 13 pixels on the page.
fn font(size: u32, bold: bool, colour: &RGBColor, h: HPos, v: VPos) -> TextStyle<'_> {
    let style = if bold {
        FontStyle::Bold
    } else {
        FontStyle::Normal
    };
    (FONT, size)
        .into_font()
        .style(style)
        .color(colour)
        .pos(Pos::new(h, v))
}

/// Text centred on a point.
pub(crate) fn centred(
    area: &Area,
    text: &str,
    at: (i32, i32),
    size: u32,
    bold: bool,
    colour: &RGBColor,
) -> Drawn {
    area.draw(&Text::new(
        text,
        at,
        font(size, bold, colour, HPos::Center, VPos::Center),
    ))?;
    Ok(())
}

/// Text whose left (or right) end sits on a point, vertically centred.
pub(crate) fn aligned(
    area: &Area,
    text: &str,
    at: (i32, i32),
    size: u32,
    h: HPos,
    colour: &RGBColor,
) -> Drawn {
    area.draw(&Text::new(
        text,
        at,
        font(size, false, colour, h, VPos::Center),
    ))?;
    Ok(())
}

/// A filled box with an outline. Plotters draws a rectangle either filled
/// or outlined, so the box is two rectangles.
fn outlined(area: &Area, frame: Frame, fill: RGBColor, edge: RGBColor) -> Drawn {
    area.draw(&Rectangle::new(frame.corners(), fill.filled()))?;
    area.draw(&Rectangle::new(frame.corners(), edge.stroke_width(1)))?;
    Ok(())
}

/// A labelled node of the diagram: a bold name, then smaller detail lines.
pub(crate) fn node(
    area: &Area,
    frame: Frame,
    lines: &[&str],
    fill: RGBColor,
    edge: RGBColor,
) -> Drawn {
    outlined(area, frame, fill, edge)?;
    let spacing = 17;
    let first = frame.centre_y() - spacing * (lines.len() as i32 - 1) / 2;
    for (row, line) in lines.iter().enumerate() {
        let y = first + spacing * row as i32;
        let (size, bold) = if row == 0 { (18, true) } else { (15, false) };
        centred(area, line, (frame.centre_x(), y), size, bold, &INK)?;
    }
    Ok(())
}

/// A polyline ending in a filled triangular head at its last point.
pub(crate) fn arrow(area: &Area, points: &[(i32, i32)], colour: RGBColor) -> Drawn {
    const HEAD_LENGTH: f64 = 9.0;
    const HEAD_HALF_WIDTH: f64 = 4.5;
    let [.., (x0, y0), (x1, y1)] = points else {
        return Ok(());
    };
    let (dx, dy) = (f64::from(x1 - x0), f64::from(y1 - y0));
    let length = dx.hypot(dy).max(1.0);
    let (ux, uy) = (dx / length, dy / length);
    // The shaft stops where the head starts, so the line does not poke
    // through the triangle's tip.
    let base = (
        f64::from(*x1) - ux * HEAD_LENGTH,
        f64::from(*y1) - uy * HEAD_LENGTH,
    );
    let pixel = |(x, y): (f64, f64)| (x.round() as i32, y.round() as i32);
    let mut shaft = points[..points.len() - 1].to_vec();
    shaft.push(pixel(base));
    area.draw(&PathElement::new(shaft, colour.stroke_width(2)))?;
    let side = |sign: f64| {
        pixel((
            base.0 - uy * HEAD_HALF_WIDTH * sign,
            base.1 + ux * HEAD_HALF_WIDTH * sign,
        ))
    };
    area.draw(&Polygon::new(
        vec![(*x1, *y1), side(1.0), side(-1.0)],
        colour.filled(),
    ))?;
    Ok(())
}

/// The light panel behind one half of the diagram, with its heading.
fn panel(area: &Area, frame: Frame, heading: &str) -> Drawn {
    outlined(area, frame, PANEL_FILL, PANEL_EDGE)?;
    let at = (frame.x + 12, frame.y + 8);
    area.draw(&Text::new(
        heading,
        at,
        font(19, true, &INK, HPos::Left, VPos::Top),
    ))?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Top left: the rollout cycle.

// The bottom row of the cycle shares its centre line with "Trajectories",
// so the "trajectory" arrow reads as leaving the rollout's last step.
const ROLLOUT: Frame = Frame::new(10, 12, 510, 340);
const POLICY: Frame = Frame::new(40, 72, 150, 56);
const PARSER: Frame = Frame::new(340, 72, 160, 56);
const ENVIRONMENT: Frame = Frame::new(285, 273, 225, 66);
const CONTEXT: Frame = Frame::new(40, 273, 150, 66);

fn draw_rollout(area: &Area) -> Drawn {
    panel(area, ROLLOUT, "Rollout")?;
    draw_policy_node(area)?;
    node(
        area,
        PARSER,
        &["Parser", "<call> tool arg </call>"],
        WHITE,
        GREY,
    )?;
    node(
        area,
        ENVIRONMENT,
        &["Environment", "tools: read / test / edit / submit"],
        WHITE,
        GREY,
    )?;
    node(
        area,
        CONTEXT,
        &["Context", "transcript so far"],
        WHITE,
        GREY,
    )?;
    draw_cycle_arrows(area)
}

/// The policy node, with "π" and a lowered, smaller "θ" as its subscript.
fn draw_policy_node(area: &Area) -> Drawn {
    node(area, POLICY, &["Policy", ""], POLICY_TINT, POLICY_BLUE)?;
    let (x, y) = (POLICY.centre_x(), POLICY.centre_y() + 8);
    area.draw(&Text::new(
        "π",
        (x + 1, y),
        font(18, false, &INK, HPos::Right, VPos::Center),
    ))?;
    area.draw(&Text::new(
        "θ",
        (x + 1, y + 5),
        font(13, false, &INK, HPos::Left, VPos::Center),
    ))?;
    Ok(())
}

/// Policy → parser → environment → context → policy, clockwise.
fn draw_cycle_arrows(area: &Area) -> Drawn {
    let top = POLICY.centre_y();
    arrow(area, &[(POLICY.right(), top), (PARSER.x, top)], ARROW)?;
    centred(
        area,
        "action tokens",
        ((POLICY.right() + PARSER.x) / 2, top - 12),
        15,
        false,
        &INK,
    )?;

    let right = PARSER.centre_x();
    let middle = (PARSER.bottom() + ENVIRONMENT.y) / 2;
    arrow(
        area,
        &[(right, PARSER.bottom()), (right, ENVIRONMENT.y)],
        ARROW,
    )?;
    aligned(
        area,
        "tool call",
        (right - 8, middle),
        15,
        HPos::Right,
        &INK,
    )?;

    // The observation label is two short lines: the gap between the boxes
    // is too narrow for "observation tokens" on one line.
    let bottom = CONTEXT.centre_y();
    let gap_centre = (CONTEXT.right() + ENVIRONMENT.x) / 2;
    arrow(
        area,
        &[(ENVIRONMENT.x, bottom), (CONTEXT.right(), bottom)],
        ARROW,
    )?;
    centred(
        area,
        "observation",
        (gap_centre, bottom - 28),
        15,
        false,
        &INK,
    )?;
    centred(area, "tokens", (gap_centre, bottom - 13), 15, false, &INK)?;

    let left = POLICY.centre_x();
    arrow(area, &[(left, CONTEXT.y), (left, POLICY.bottom())], ARROW)?;
    aligned(
        area,
        "next prompt",
        (left + 8, middle),
        15,
        HPos::Left,
        &INK,
    )
}

// ---------------------------------------------------------------------------
// Top right: the learning chain, drawn bottom-up so that the update ends
// next to the "new weights" arrow that runs back to the policy.

const LEARNING: Frame = Frame::new(600, 12, 350, 340);
const UPDATE: Frame = Frame::new(645, 72, 260, 48);
const ADVANTAGES: Frame = Frame::new(645, 142, 260, 48);
const REWARDS: Frame = Frame::new(645, 212, 260, 48);
const TRAJECTORIES: Frame = Frame::new(645, 282, 260, 48);

fn draw_learning(area: &Area) -> Drawn {
    panel(area, LEARNING, "Learning")?;
    node(
        area,
        TRAJECTORIES,
        &["Trajectories", "a group of finished episodes"],
        LEARN_TINT,
        LEARN_ORANGE,
    )?;
    node(
        area,
        REWARDS,
        &["Rewards", "hidden tests, 1 or 0"],
        LEARN_TINT,
        LEARN_ORANGE,
    )?;
    node(
        area,
        ADVANTAGES,
        &["Advantages", "reward minus a baseline"],
        LEARN_TINT,
        LEARN_ORANGE,
    )?;
    node(
        area,
        UPDATE,
        &["Masked policy update", "loss on mask-1 tokens only"],
        LEARN_TINT,
        LEARN_ORANGE,
    )?;
    let chain = [TRAJECTORIES, REWARDS, ADVANTAGES, UPDATE];
    for pair in chain.windows(2) {
        let x = pair[0].centre_x();
        arrow(area, &[(x, pair[0].y), (x, pair[1].bottom())], ARROW)?;
    }
    Ok(())
}

/// The two arrows between the panels.
fn draw_links(area: &Area) -> Drawn {
    let gap_centre = (ROLLOUT.right() + LEARNING.x) / 2;

    let y = TRAJECTORIES.centre_y();
    arrow(
        area,
        &[(ROLLOUT.right(), y), (TRAJECTORIES.x, y)],
        LEARN_ORANGE,
    )?;
    centred(area, "trajectory", (gap_centre, y - 12), 15, false, &INK)?;

    // "new weights" leaves the top of the update, runs above the rollout
    // boxes and drops into the top of the policy.
    let lane = POLICY.y - 24;
    let route = [
        (UPDATE.centre_x(), UPDATE.y),
        (UPDATE.centre_x(), lane),
        (POLICY.centre_x(), lane),
        (POLICY.centre_x(), POLICY.y),
    ];
    arrow(area, &route, POLICY_BLUE)?;
    // The gap between the panels is too narrow for this label, so it sits
    // over the lane between the policy and the parser.
    let label_x = (POLICY.right() + PARSER.x) / 2;
    centred(area, "new weights", (label_x, lane - 11), 15, false, &INK)
}

// ---------------------------------------------------------------------------
// Bottom: the token strip.

/// One word of the transcript as a box of the strip, in pixels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBox {
    pub owner: Owner,
    pub word: String,
    pub x: i32,
    pub y: i32,
    pub size: i32,
}

/// Where the strip's boxes go: from x 70 to 940, in two rows starting at y 404.
const STRIP_LEFT: i32 = 70;
const STRIP_RIGHT: i32 = 940;
const STRIP_TOP: i32 = 404;
const STRIP_ROWS: i32 = 2;
const ROW_HEIGHT: i32 = 42;
/// The widest spacing between boxes; longer transcripts get a tighter one.
const MAX_PITCH: i32 = 20;
/// Below this spacing a box is too small to read, so the strip is refused.
const MIN_PITCH: i32 = 4;

// ANCHOR: strip_layout
/// Lay out the token strip: one box per whitespace-separated word, left to
/// right, wrapping onto a second row. Boxes shrink for long transcripts so
/// that every word fits; beyond a few hundred words it is an error.
pub fn strip_layout(strip: &[(Owner, String)]) -> Result<Vec<TokenBox>, String> {
    let words: Vec<(Owner, &str)> = strip
        .iter()
        .flat_map(|(owner, text)| text.split_whitespace().map(move |word| (*owner, word)))
        .collect();
    let pitch = strip_pitch(words.len())?;
    let per_row = ((STRIP_RIGHT - STRIP_LEFT) / pitch) as usize;
    let size = pitch * 4 / 5;
    let place = |(index, (owner, word)): (usize, (Owner, &str))| TokenBox {
        owner,
        word: word.to_string(),
        x: STRIP_LEFT + pitch * (index % per_row) as i32,
        y: STRIP_TOP + ROW_HEIGHT * (index / per_row) as i32,
        size,
    };
    Ok(words.into_iter().enumerate().map(place).collect())
}
// ANCHOR_END: strip_layout

/// The largest box spacing (up to [`MAX_PITCH`]) at which `count` words fit in the rows.
fn strip_pitch(count: usize) -> Result<i32, String> {
    let width = STRIP_RIGHT - STRIP_LEFT;
    let fits = |pitch: i32| (width / pitch) as usize * STRIP_ROWS as usize >= count;
    (MIN_PITCH..=MAX_PITCH)
        .rev()
        .find(|&pitch| fits(pitch))
        .ok_or_else(|| {
            let most = (width / MIN_PITCH * STRIP_ROWS) as usize;
            format!("the token strip has {count} words; at most {most} fit")
        })
}

fn draw_strip(area: &Area, boxes: &[TokenBox]) -> Drawn {
    let heading = "Token strip: one box per word of the episode, coloured by who wrote it";
    area.draw(&Text::new(
        heading,
        (22, 370),
        font(17, true, &INK, HPos::Left, VPos::Top),
    ))?;
    // Mask digits need about 12 pixels; in a denser strip the colour says it.
    let show_mask = boxes.first().is_some_and(|first| first.size >= 12);
    for row in 0..STRIP_ROWS {
        let y = STRIP_TOP + ROW_HEIGHT * row;
        aligned(area, "word", (22, y + 8), 14, HPos::Left, &GREY)?;
        if show_mask {
            aligned(area, "mask", (22, y + 28), 14, HPos::Left, &GREY)?;
        }
    }
    for token in boxes {
        token_box(
            area,
            token.owner,
            Frame::new(token.x, token.y, token.size, token.size),
        )?;
        if show_mask {
            mask_digit(area, token)?;
        }
    }
    draw_strip_legend(area)
}

/// One box of the strip in its owner's style: policy words filled blue,
/// environment words with a solid grey outline, prompt words with a dashed
/// lighter outline.
fn token_box(area: &Area, owner: Owner, frame: Frame) -> Drawn {
    match owner {
        Owner::Policy => area.draw(&Rectangle::new(frame.corners(), POLICY_BLUE.filled()))?,
        Owner::Env => area.draw(&Rectangle::new(frame.corners(), GREY.stroke_width(1)))?,
        Owner::Prompt => {
            let (x0, y0, x1, y1) = (frame.x, frame.y, frame.right(), frame.bottom());
            let outline = [(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)];
            area.draw(&DashedPathElement::new(
                outline,
                3,
                2,
                PROMPT_EDGE.stroke_width(1),
            ))?
        }
    }
    Ok(())
}

/// The loss mask under a box: 1 for the policy's own words, else 0.
fn mask_digit(area: &Area, token: &TokenBox) -> Drawn {
    let (digit, colour, bold) = match token.owner {
        Owner::Policy => ("1", POLICY_BLUE, true),
        Owner::Env | Owner::Prompt => ("0", GREY, false),
    };
    centred(
        area,
        digit,
        (token.x + token.size / 2, token.y + 28),
        14,
        bold,
        &colour,
    )
}

/// The key under the strip: one sample box and an explanation per owner.
fn draw_strip_legend(area: &Area) -> Drawn {
    let y = 508;
    let entries = [
        (Owner::Prompt, STRIP_LEFT, "prompt (dashed): mask 0"),
        (
            Owner::Policy,
            330,
            "policy's action tokens: mask 1, trained on",
        ),
        (Owner::Env, 680, "env / tool output: mask 0"),
    ];
    for (owner, x, text) in entries {
        token_box(area, owner, Frame::new(x, y - 8, 16, 16))?;
        aligned(area, text, (x + 24, y), 15, HPos::Left, &INK)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::run_episode;

    /// The solver's episode from chapter 1: read, test, fix, test, submit.
    fn solver_transcript() -> Vec<(Owner, String)> {
        let messages = [
            "<call> read </call>",
            "<call> test </call>",
            "<call> edit swap_minmax </call>",
            "<call> test </call>",
            "<call> submit </call>",
        ];
        run_episode(&messages, 6).transcript
    }

    fn count(boxes: &[TokenBox], owner: Owner) -> usize {
        boxes.iter().filter(|token| token.owner == owner).count()
    }

    #[test]
    fn diagrams_strip_has_one_box_per_word() {
        let boxes = strip_layout(&solver_transcript()).unwrap();
        assert_eq!(boxes.len(), 84);
        let owners = (
            count(&boxes, Owner::Prompt),
            count(&boxes, Owner::Policy),
            count(&boxes, Owner::Env),
        );
        assert_eq!(owners, (20, 16, 48));
        // No two boxes share a place, and every box stays on the canvas.
        let mut places: Vec<(i32, i32)> = boxes.iter().map(|token| (token.x, token.y)).collect();
        places.sort();
        places.dedup();
        assert_eq!(places.len(), boxes.len());
        assert!(boxes
            .iter()
            .all(|token| token.x + token.size <= STRIP_RIGHT && token.y + 28 < 510));
        // The transcript's order survives: the first word is the prompt's.
        assert_eq!(boxes[0].word, "clamp(value,");
        assert_eq!(boxes[20].word, "<call>");
    }

    #[test]
    fn diagrams_svg_shows_every_box() {
        let svg = agentic_rl_loop_svg(&solver_transcript()).unwrap();
        // Policy boxes are the only rectangles filled with the accent blue:
        // 16 words plus the legend's sample.
        let blue = format!(
            "fill=\"#{:02X}{:02X}{:02X}\"",
            POLICY_BLUE.0, POLICY_BLUE.1, POLICY_BLUE.2
        );
        let policy_boxes = svg
            .lines()
            .filter(|line| line.starts_with("<rect") && line.contains(&blue))
            .count();
        assert_eq!(policy_boxes, 16 + 1, "{blue}");
        let labels = [
            "Policy",
            "Parser",
            "Environment",
            "Context",
            "Trajectories",
            "Masked policy update",
        ];
        for label in
            labels
                .into_iter()
                .chain(["new weights", "trajectory", "observation", "next prompt"])
        {
            assert!(svg.contains(label), "missing {label}");
        }
    }

    #[test]
    fn diagrams_strip_shrinks_then_refuses() {
        let long = vec![(Owner::Env, "w ".repeat(300))];
        let boxes = strip_layout(&long).unwrap();
        assert_eq!(boxes.len(), 300);
        assert!(boxes[0].size < 16);
        assert!(boxes
            .iter()
            .all(|token| token.x + token.size <= STRIP_RIGHT));
        let too_long = vec![(Owner::Env, "w ".repeat(1000))];
        assert!(strip_layout(&too_long).unwrap_err().contains("1000 words"));
    }

    #[test]
    fn diagrams_are_byte_identical_across_runs() {
        crate::plot::tests::assert_same_svg_twice("diagram", |path| {
            agentic_rl_loop(path, &solver_transcript()).unwrap()
        });
    }

    #[test]
    fn diagrams_errors_name_the_path() {
        let path = Path::new("/nonexistent-dir/agentrl/figure-1-1.svg");
        let err = agentic_rl_loop(path, &solver_transcript()).unwrap_err();
        assert!(
            err.contains("/nonexistent-dir/agentrl/figure-1-1.svg"),
            "{err}"
        );
    }
}
