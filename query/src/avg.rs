//! `avg` over `Float64` (and every integer, which the planner casts to `Float64` first)
//! with a grouped accumulator that adds a run of rows of the same group in a register.
//!
//! Quiver's files are sorted by tags, then time, so a `GROUP BY host, hour` meets each
//! group hundreds of rows in a row. DataFusion's own accumulator adds every value into
//! the group's slot in memory; consecutive rows of one group then form a chain of
//! store-to-load forwarding plus a floating-point add, about ten cycles a value (perf:
//! 98 % of the TSBS `double-groupby-all` aggregation on one `movsd` store). Here a run
//! is summed in registers and stored once: a short run one value after another, in
//! DataFusion's order (bit for bit its sums), a long one in eight lanes (exact for
//! integers, see [`sum_run`]). Everything else (signature,
//! types, state layout, the ungrouped and sliding accumulators, decimals, durations,
//! `DISTINCT`) is DataFusion's `Avg`, delegated.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, PrimitiveArray, UInt64Array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::FieldRef;
use datafusion::arrow::datatypes::{ArrowPrimitiveType, DataType, Float64Type, UInt64Type};
use datafusion::common::{internal_datafusion_err, Result};
use datafusion::functions_aggregate::average::Avg;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator,
    ReversedUDAF, Signature,
};

/// The `avg` (and `mean`) Quiver registers in place of DataFusion's.
pub fn avg() -> Arc<AggregateUDF> {
    Arc::new(AggregateUDF::new_from_impl(RunAwareAvg::default()))
}

/// DataFusion's `Avg`, with the `Float64` grouped accumulator replaced.
#[derive(Debug, Default, PartialEq, Eq, Hash)]
struct RunAwareAvg {
    inner: Avg,
}

impl AggregateUDFImpl for RunAwareAvg {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.accumulator(acc_args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let float = args.expr_fields[0].data_type() == &DataType::Float64
            && args.return_field.data_type() == &DataType::Float64;
        if float && !args.is_distinct {
            Ok(Box::<RunSumAvg>::default())
        } else {
            self.inner.create_groups_accumulator(args)
        }
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_expr()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// Sums and counts per group; a group with no value counted averages to NULL. The
/// state is DataFusion's: `[count UInt64, sum Float64]`, NULL for groups without a
/// value.
#[derive(Debug, Default)]
struct RunSumAvg {
    sums: Vec<f64>,
    counts: Vec<u64>,
}

/// Calls `add(group, start, end)` for each run of equal consecutive group indices.
#[inline]
fn for_each_run(group_indices: &[usize], mut add: impl FnMut(usize, usize, usize)) {
    let mut start = 0;
    while start < group_indices.len() {
        let group = group_indices[start];
        let mut end = start + 1;
        // Eight at a time while whole chunks belong to the group (a vector compare),
        // then one at a time.
        while let Some(chunk) = group_indices.get(end..end + 8) {
            if !chunk.iter().fold(true, |same, g| same & (*g == group)) {
                break;
            }
            end += 8;
        }
        while end < group_indices.len() && group_indices[end] == group {
            end += 1;
        }
        add(group, start, end);
        start = end;
    }
}

/// Runs shorter than this are added one value after another, as DataFusion does.
const LANES_FROM: usize = 32;

/// `sum` plus `values`. A long run is added in eight independent lanes (a vector
/// register, no chain of dependent additions), which rounds differently from adding
/// one value after another only where the sum is inexact: never for integers below
/// 2^53 (every integer field, cast to `Float64` by the planner), and otherwise within
/// the rounding any other order of the same additions gives (as does any split of the
/// rows between partitions).
#[inline]
fn sum_run(sum: f64, values: &[f64]) -> f64 {
    if values.len() < LANES_FROM {
        return values.iter().fold(sum, |s, v| s + v);
    }
    let mut lanes = [0.0f64; 8];
    let chunks = values.chunks_exact(8);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, value) in lanes.iter_mut().zip(chunk) {
            *lane += value;
        }
    }
    let lanes = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
        + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    rest.iter().fold(sum + lanes, |s, v| s + v)
}

/// Which rows count: valid values that the filter (if any) lets through.
fn counted_rows(nulls: Option<&NullBuffer>, filter: Option<&BooleanArray>) -> Option<NullBuffer> {
    let filter = filter.map(|f| {
        // A NULL filter value does not let the row through.
        let passes = match f.nulls() {
            Some(n) => f.values() & n.inner(),
            None => f.values().clone(),
        };
        NullBuffer::new(passes)
    });
    NullBuffer::union(nulls, filter.as_ref())
}

/// Argument `index` as an array of `T`: the planner only hands this accumulator
/// `Float64` values and its own state, so anything else is an internal error, answered
/// as one rather than a panic.
fn column<T: ArrowPrimitiveType>(values: &[ArrayRef], index: usize) -> Result<&PrimitiveArray<T>> {
    values
        .get(index)
        .and_then(|v| v.as_primitive_opt::<T>())
        .ok_or_else(|| {
            internal_datafusion_err!("avg: argument {index} is not of type {}", T::DATA_TYPE)
        })
}

impl RunSumAvg {
    fn grow(&mut self, total_num_groups: usize) {
        self.sums.resize(total_num_groups, 0.0);
        self.counts.resize(total_num_groups, 0);
    }

    /// Adds `values` (rows `counted` marks, or all) to their groups, run by run, in
    /// row order.
    fn add(&mut self, group_indices: &[usize], values: &[f64], counted: Option<&NullBuffer>) {
        debug_assert_eq!(group_indices.len(), values.len());
        let (sums, counts) = (&mut self.sums, &mut self.counts);
        match counted {
            None => for_each_run(group_indices, |group, start, end| {
                sums[group] = sum_run(sums[group], &values[start..end]);
                counts[group] += (end - start) as u64;
            }),
            Some(counted) => for_each_run(group_indices, |group, start, end| {
                let mut sum = sums[group];
                let mut count = 0;
                for (row, value) in values.iter().enumerate().take(end).skip(start) {
                    if counted.is_valid(row) {
                        sum += value;
                        count += 1;
                    }
                }
                sums[group] = sum;
                counts[group] += count;
            }),
        }
    }

    /// The groups `emit_to` asks for, and which of them have a value.
    fn take(&mut self, emit_to: EmitTo) -> (Vec<f64>, Vec<u64>, Option<NullBuffer>) {
        let sums = emit_to.take_needed(&mut self.sums);
        let counts = emit_to.take_needed(&mut self.counts);
        let nulls = counts
            .contains(&0)
            .then(|| NullBuffer::from_iter(counts.iter().map(|c| *c > 0)));
        (sums, counts, nulls)
    }
}

impl GroupsAccumulator for RunSumAvg {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let values = column::<Float64Type>(values, 0)?;
        self.grow(total_num_groups);
        let counted = counted_rows(values.nulls(), opt_filter);
        self.add(group_indices, values.values(), counted.as_ref());
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (sums, counts, nulls) = self.take(emit_to);
        let averages: Vec<f64> = sums
            .iter()
            .zip(&counts)
            .map(|(sum, count)| {
                if *count == 0 {
                    0.0
                } else {
                    sum / *count as f64
                }
            })
            .collect();
        Ok(Arc::new(Float64Array::new(averages.into(), nulls)))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (sums, counts, nulls) = self.take(emit_to);
        Ok(vec![
            Arc::new(UInt64Array::new(counts.into(), nulls.clone())),
            Arc::new(Float64Array::new(sums.into(), nulls)),
        ])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        let counts = column::<UInt64Type>(values, 0)?;
        let sums = column::<Float64Type>(values, 1)?;
        self.grow(total_num_groups);
        for (row, group) in group_indices.iter().enumerate() {
            if counts.is_valid(row) && sums.is_valid(row) {
                self.sums[*group] += sums.value(row);
                self.counts[*group] += counts.value(row);
            }
        }
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let values = column::<Float64Type>(values, 0)?;
        let counted = counted_rows(values.nulls(), opt_filter);
        Ok(vec![
            Arc::new(UInt64Array::new(
                vec![1u64; values.len()].into(),
                counted.clone(),
            )),
            Arc::new(Float64Array::new(values.values().clone(), counted)),
        ])
    }

    fn size(&self) -> usize {
        self.sums.capacity() * size_of::<f64>() + self.counts.capacity() * size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::functions_aggregate::average::Avg;
    use datafusion::logical_expr::AggregateUDFImpl;
    use proptest::prelude::*;

    /// One update: group indices, values, and an optional filter.
    type Batch = (Vec<usize>, Vec<Option<f64>>, Option<Vec<Option<bool>>>);

    /// DataFusion's own grouped `avg` over Float64, for comparison.
    fn reference() -> Box<dyn GroupsAccumulator> {
        use datafusion::arrow::datatypes::{Field, Schema};
        use datafusion::physical_expr::expressions::col;
        let schema = Schema::new(vec![Field::new("x", DataType::Float64, true)]);
        let field: FieldRef = Arc::new(Field::new("x", DataType::Float64, true));
        let return_field: FieldRef = Arc::new(Field::new("avg", DataType::Float64, true));
        let expr = col("x", &schema).expect("column x");
        let args = AccumulatorArgs {
            return_field,
            schema: &schema,
            ignore_nulls: false,
            order_bys: &[],
            is_reversed: false,
            name: "avg(x)",
            is_distinct: false,
            exprs: &[expr],
            expr_fields: &[field],
        };
        Avg::default()
            .create_groups_accumulator(args)
            .expect("DataFusion's avg accumulator")
    }

    /// Feeds `batches` as an aggregation does: group ids numbered in order of first
    /// appearance, `total_num_groups` the ids handed out so far. Returns the number
    /// of groups.
    fn run(acc: &mut dyn GroupsAccumulator, batches: &[Batch]) -> usize {
        let mut ids = std::collections::HashMap::new();
        for (indices, values, filter) in batches {
            let indices: Vec<usize> = indices
                .iter()
                .map(|g| {
                    let next = ids.len();
                    *ids.entry(*g).or_insert(next)
                })
                .collect();
            let values: ArrayRef = Arc::new(Float64Array::from(values.clone()));
            let filter = filter.clone().map(BooleanArray::from);
            acc.update_batch(&[values], &indices, filter.as_ref(), ids.len())
                .expect("update");
        }
        ids.len()
    }

    /// Batches of up to 300 rows in runs of up to 80 (both sides of [`LANES_FROM`]),
    /// half of them a tenth NULL, sometimes filtered; values whole numbers when
    /// `integral`.
    fn batch_strategy(groups: usize, integral: bool) -> impl Strategy<Value = Batch> {
        (1usize..300, any::<bool>()).prop_flat_map(move |(len, with_nulls)| {
            let valid = if with_nulls { 0.9 } else { 0.999_999 };
            let value: BoxedStrategy<f64> = if integral {
                (-1_000_000i64..1_000_000).prop_map(|v| v as f64).boxed()
            } else {
                (-1.0e6f64..1.0e6).boxed()
            };
            (
                // Runs: mostly repeats of the previous group, as in sorted files.
                proptest::collection::vec((0..groups, 1usize..80), len / 8 + 1).prop_map(
                    move |runs| {
                        runs.into_iter()
                            .flat_map(|(g, n)| std::iter::repeat_n(g, n))
                            .take(len)
                            .collect::<Vec<_>>()
                    },
                ),
                proptest::collection::vec(proptest::option::weighted(valid, value), len),
                proptest::option::of(proptest::collection::vec(
                    proptest::option::weighted(0.9, any::<bool>()),
                    len,
                )),
            )
                .prop_map(|(mut indices, mut values, mut filter)| {
                    let n = indices.len().min(values.len());
                    indices.truncate(n);
                    values.truncate(n);
                    if let Some(f) = filter.as_mut() {
                        f.truncate(n);
                    }
                    (indices, values, filter)
                })
        })
    }

    proptest! {
        /// Bit for bit DataFusion's answers and state for whole numbers (every
        /// integer field), with runs, NULLs and filters, across batches, and after a
        /// partial/final merge.
        #[test]
        fn equals_datafusions_avg(
            batches in proptest::collection::vec(batch_strategy(7, true), 1..5),
        ) {
            let mut ours = RunSumAvg::default();
            let mut theirs = reference();
            let groups = run(&mut ours, &batches);
            run(theirs.as_mut(), &batches);
            let our_state = ours.state(EmitTo::All).expect("state");
            let their_state = theirs.state(EmitTo::All).expect("state");
            prop_assert_eq!(&our_state, &their_state);

            // Final phase: merge the state twice (two partitions with the same rows).
            let indices: Vec<usize> = (0..groups).collect();
            let mut ours = RunSumAvg::default();
            let mut theirs = reference();
            for _ in 0..2 {
                ours.merge_batch(&our_state, &indices, groups).expect("merge");
                theirs.merge_batch(&their_state, &indices, groups).expect("merge");
            }
            let our_avg = ours.evaluate(EmitTo::All).expect("evaluate");
            let their_avg = theirs.evaluate(EmitTo::All).expect("evaluate");
            prop_assert_eq!(&our_avg, &their_avg);

            // Skipped partial aggregation: each row becomes a state of its own.
            for (_, values, filter) in &batches {
                let values: ArrayRef = Arc::new(Float64Array::from(values.clone()));
                let filter = filter.clone().map(BooleanArray::from);
                let ours = ours.convert_to_state(std::slice::from_ref(&values), filter.as_ref()).expect("convert");
                let theirs = theirs.convert_to_state(&[values], filter.as_ref()).expect("convert");
                prop_assert_eq!(ours, theirs);
            }
        }

        /// Fractions: the same groups NULL, and averages within rounding of
        /// DataFusion's (long runs add in another order).
        #[test]
        fn fractions_round_like_datafusions_avg(
            batches in proptest::collection::vec(batch_strategy(5, false), 1..4),
        ) {
            let mut ours = RunSumAvg::default();
            let mut theirs = reference();
            run(&mut ours, &batches);
            run(theirs.as_mut(), &batches);
            let ours = ours.evaluate(EmitTo::All).expect("evaluate");
            let theirs = theirs.evaluate(EmitTo::All).expect("evaluate");
            let (ours, theirs) = (ours.as_primitive::<Float64Type>(), theirs.as_primitive::<Float64Type>());
            prop_assert_eq!(ours.len(), theirs.len());
            for row in 0..ours.len() {
                prop_assert_eq!(ours.is_valid(row), theirs.is_valid(row));
            }
            for (a, b) in ours.iter().zip(theirs.iter()) {
                if let (Some(a), Some(b)) = (a, b) {
                    prop_assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn arguments_of_another_type_are_an_error_not_a_panic() {
        let mut acc = RunSumAvg::default();
        let strings: ArrayRef = Arc::new(datafusion::arrow::array::StringArray::from(vec!["a"]));
        assert!(acc
            .update_batch(std::slice::from_ref(&strings), &[0], None, 1)
            .is_err());
        assert!(acc.update_batch(&[], &[], None, 0).is_err());
        assert!(acc
            .merge_batch(std::slice::from_ref(&strings), &[0], 1)
            .is_err());
        assert!(acc.convert_to_state(&[strings], None).is_err());
    }

    #[test]
    fn emits_the_first_groups_and_keeps_the_rest() {
        let mut acc = RunSumAvg::default();
        let values: ArrayRef = Arc::new(Float64Array::from(vec![1.0, 3.0, 10.0, 5.0]));
        acc.update_batch(&[values], &[0, 0, 1, 2], None, 4)
            .expect("update");
        let first = acc.evaluate(EmitTo::First(2)).expect("evaluate");
        assert_eq!(
            first.as_primitive::<Float64Type>(),
            &Float64Array::from(vec![2.0, 10.0])
        );
        let rest = acc.evaluate(EmitTo::All).expect("evaluate");
        assert_eq!(
            rest.as_primitive::<Float64Type>(),
            &Float64Array::from(vec![Some(5.0), None])
        );
    }
}
