//! What the operator sees while the campaign runs: on a terminal, a bar over the
//! estimated campaign length with an ETA and the current step; otherwise (a log, CI)
//! one plain line per step and result.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Prints a line on stdout; a reader that went away (`| head`) does not stop the
/// campaign (its report is still written).
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// The campaign's progress display.
pub struct Progress {
    started: Instant,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar over `estimate` on a terminal, plain lines otherwise.
    pub fn new(estimate: Duration) -> Progress {
        let bar = std::io::stdout().is_terminal().then(|| {
            let bar = ProgressBar::new(estimate.as_secs().max(1));
            if let Ok(style) =
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] eta {eta} {wide_msg}")
            {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(500));
            bar
        });
        Progress {
            started: Instant::now(),
            bar,
        }
    }

    fn tick(&self) {
        if let Some(bar) = &self.bar {
            let elapsed = self.started.elapsed().as_secs();
            // The estimate can be short: grow the bar rather than sit at 100 %.
            if elapsed + 5 > bar.length().unwrap_or(0) {
                bar.set_length(elapsed + 30);
            }
            bar.set_position(elapsed);
        }
    }

    /// A step starts.
    pub fn step(&self, what: &str) {
        self.tick();
        match &self.bar {
            Some(bar) => bar.set_message(what.to_string()),
            None => say(&format!(
                "[{:>6.1}s] {what}",
                self.started.elapsed().as_secs_f64()
            )),
        }
    }

    /// A result worth a line of its own on both displays.
    pub fn line(&self, text: &str) {
        self.tick();
        match &self.bar {
            Some(bar) => bar.println(text),
            None => say(&format!(
                "[{:>6.1}s]   {text}",
                self.started.elapsed().as_secs_f64()
            )),
        }
    }

    /// Ends the display.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
