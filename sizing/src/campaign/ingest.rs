//! Ingest sweeps: for one configuration, offer rising rates until a run fails to
//! qualify, narrow the gap, then confirm the highest qualifying rate for `--duration`
//! (stepping down by a fifth when the long run does not hold).

use super::progress::Progress;
use super::settings::{Configuration, Settings};
use super::write_run::{settle, write_run, RunContext, RunRequest};
use crate::error::Result;
use crate::report::model::{RunKind, Sweep, WriteRun};
use crate::units::{sig3, thousands};

/// Each failed confirmation is retried at this share of its rate.
const CONFIRM_STEP_DOWN: f64 = 0.8;

/// The rates a confirmation tries, in order: the sweep's best, then a fifth lower each
/// time while that stays above the next lower rate that qualified in the sweep (or
/// half the best when none did), and last that rate: a short step that qualified once
/// may not hold for `--duration`, and the sweep's rate below it is the known-good
/// fallback.
pub fn confirm_rates(best: f64, qualified: &[f64], attempts: u32) -> Vec<f64> {
    let attempts = attempts.max(1) as usize;
    let fallback = qualified
        .iter()
        .copied()
        .filter(|r| *r < best)
        .reduce(f64::max)
        .unwrap_or(best * 0.5);
    let mut rates = vec![best];
    while rates.len() + 1 < attempts {
        let next = rates[rates.len() - 1] * CONFIRM_STEP_DOWN;
        if next <= fallback {
            break;
        }
        rates.push(next);
    }
    if attempts > 1 {
        rates.push(fallback);
    }
    rates
}

/// Prints a run's one-line result.
fn report_line(progress: &Progress, run: &WriteRun) {
    let verdict = if run.qualified {
        "qualified".to_string()
    } else {
        let gates: Vec<String> = run.gates_failed.iter().map(ToString::to_string).collect();
        format!("failed: {}", gates.join("; "))
    };
    progress.line(&format!(
        "{}: offered {} rows/s, acked {} rows/s, p99 {} ms, persisted == acked: {}, {}; bottleneck: {} ({})",
        run.id,
        thousands(run.offered_rate_rows_per_s),
        thousands(run.acked_rate_rows_per_s),
        sig3(run.outcome.latency_ms.p99),
        run.persisted_equals_acked,
        verdict,
        run.bottleneck.resource.label(),
        crate::units::percent(run.bottleneck.utilization),
    ));
}

/// Why a failing step failed, in one line.
fn why(run: &WriteRun) -> String {
    let gates: Vec<String> = run.gates_failed.iter().map(ToString::to_string).collect();
    format!(
        "at {} rows/s: {}; {}",
        thousands(run.offered_rate_rows_per_s),
        gates.join("; "),
        run.bottleneck.sentence
    )
}

/// Sweeps `configuration` on the node(s) of `ctx`; every run is appended to `runs`.
pub async fn sweep(
    ctx: &RunContext,
    settings: &Settings,
    configuration: &Configuration,
    progress: &Progress,
    runs: &mut Vec<WriteRun>,
) -> Result<Sweep> {
    let slug = configuration.slug();
    let mut step = 0u32;
    let run_at = |rate: f64, kind: RunKind, duration_s: f64, step: u32| {
        let id = match kind {
            RunKind::Confirm => format!("{slug}-confirm{step}"),
            _ => format!("{slug}-s{step}"),
        };
        RunRequest {
            measurement: id.replace('-', "_"),
            id,
            kind,
            configuration: configuration.clone(),
            rate_rows_per_s: rate,
            duration_s,
            hosts: settings.hosts,
            start_ns: None,
        }
    };
    let mut steps = Vec::new();
    let mut best: Option<f64> = None;
    let mut qualified_rates = Vec::new();
    let mut failing: Option<f64> = None;
    let mut stopped_because = None;
    let mut rate = settings
        .start_rate_rows_per_s
        .min(settings.rate_max_rows_per_s);
    // Upward until a step fails; downward instead when the very first one fails.
    let mut going_down = false;
    while step < settings.sweep_steps_max {
        progress.step(&format!(
            "sweep {}: {} rows/s for {} s",
            configuration.label(),
            thousands(rate),
            settings.step_s
        ));
        let run = write_run(
            ctx,
            settings,
            run_at(rate, RunKind::Sweep, settings.step_s, step),
        )
        .await?;
        step += 1;
        report_line(progress, &run);
        settle(&ctx.target).await;
        let qualified = run.qualified;
        if !qualified && failing.is_none_or(|f| rate < f) {
            failing = Some(rate);
            stopped_because = Some(why(&run));
        }
        steps.push(run.id.clone());
        runs.push(run);
        match (qualified, going_down) {
            (true, false) if rate >= settings.rate_max_rows_per_s => {
                qualified_rates.push(rate);
                best = Some(rate);
                break;
            }
            (true, false) => {
                qualified_rates.push(rate);
                best = Some(rate);
                rate = (rate * settings.rate_factor).min(settings.rate_max_rows_per_s);
            }
            (true, true) => {
                qualified_rates.push(rate);
                best = Some(rate);
                break;
            }
            (false, _) if best.is_none() => {
                going_down = true;
                rate /= settings.rate_factor;
            }
            (false, _) => break,
        }
    }
    for _ in 0..settings.refine_steps {
        let (Some(low), Some(high)) = (best, failing) else {
            break;
        };
        let mid = (low * high).sqrt();
        if high / low < 1.1 {
            break;
        }
        progress.step(&format!(
            "sweep {}: {} rows/s (between {} and {})",
            configuration.label(),
            thousands(mid),
            thousands(low),
            thousands(high)
        ));
        let run = write_run(
            ctx,
            settings,
            run_at(mid, RunKind::Sweep, settings.step_s, step),
        )
        .await?;
        step += 1;
        report_line(progress, &run);
        settle(&ctx.target).await;
        if run.qualified {
            qualified_rates.push(mid);
            best = Some(mid);
        } else {
            failing = Some(mid);
            stopped_because = Some(why(&run));
        }
        steps.push(run.id.clone());
        runs.push(run);
    }
    let mut confirms = Vec::new();
    let mut confirmed = None;
    if let Some(best) = best {
        let rates = confirm_rates(best, &qualified_rates, settings.confirm_attempts_max);
        for (attempt, rate) in rates.into_iter().enumerate() {
            let attempt = attempt as u32;
            progress.step(&format!(
                "confirm {}: {} rows/s for {} s",
                configuration.label(),
                thousands(rate),
                settings.confirm_s
            ));
            let run = write_run(
                ctx,
                settings,
                run_at(rate, RunKind::Confirm, settings.confirm_s, attempt),
            )
            .await?;
            report_line(progress, &run);
            settle(&ctx.target).await;
            let held = run.qualified;
            confirms.push(run.id.clone());
            runs.push(run);
            if held {
                confirmed = Some((rate, confirms.last().cloned()));
                break;
            }
        }
    }
    Ok(Sweep {
        label: configuration.label(),
        configuration: configuration.clone(),
        steps,
        best_qualified_rows_per_s: best,
        confirms,
        confirmed_rows_per_s: confirmed.as_ref().map(|c| c.0),
        confirmed_run: confirmed.and_then(|c| c.1),
        stopped_because,
    })
}

#[cfg(test)]
mod tests {
    use super::confirm_rates;

    #[test]
    fn confirmations_step_down_to_the_sweeps_known_good_rate() {
        let steps = [40e3, 120e3, 360e3, 1_080e3];
        let rates = confirm_rates(1_080e3, &steps, 4);
        let expected = [1_080e3, 864e3, 691.2e3, 360e3];
        assert_eq!(rates.len(), expected.len());
        for (a, b) in rates.iter().zip(expected) {
            assert!((a - b).abs() < 1e-6, "{rates:?}");
        }
        // A refined rate just below the best is reached sooner.
        assert_eq!(
            confirm_rates(400e3, &[100e3, 200e3, 300e3, 400e3], 4),
            vec![400e3, 320e3, 300e3]
        );
        // Without a lower qualifying rate, half the best is the last try.
        assert_eq!(confirm_rates(40e3, &[40e3], 2), vec![40e3, 20e3]);
        assert_eq!(confirm_rates(40e3, &[40e3], 1), vec![40e3]);
    }
}
