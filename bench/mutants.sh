#!/usr/bin/env bash
# Mutation testing (cargo-mutants) of the files whose mistakes cost users
# most: the window arithmetic, policies, headers, boundary rechecks, the
# near-cache, the listener's guard and the memcached wire format.
#
# Each group of files is mutated with only the test targets that cover it
# (unit tests always, an integration target only where the unit tests
# cannot see a behaviour), so a mutant rebuilds and runs a few test
# binaries, not the whole suite. See docs/src/contributing/mutants.md for the
# counts and how long it takes.
#
#   bench/mutants.sh                    every group, every mutant
#   bench/mutants.sh --shard 1/4        a quarter of each group (then 2/4 ...)
#   bench/mutants.sh --iterate          only what a previous run did not catch
#   MUTANTS_GROUPS="engine wire" bench/mutants.sh    some groups only
#
# Options are passed through to `cargo mutants`. Output goes to
# target/mutants/<group>[-shard-K-of-N]/mutants.out, so shards run in
# different sittings keep their own results and `--iterate` with the same
# `--shard` resumes one of them.
#
# `--in-place`: the mutants are applied to this work tree itself and its
# target/ is reused, which saves copying the tree and a full build per run.
# Run it only in a work tree of its own (a `git worktree`), nothing else
# editing or building there meanwhile; an interrupted run can leave a
# mutation in a source file (`git diff` shows it; `git checkout -- src`).
set -euo pipefail

cd "$(dirname "$0")/.."

# group | files | cargo target selection (for both the build and the test)
GROUPS_TABLE=(
    "engine|src/window.rs src/policy.rs src/headers.rs src/limiter/boundary.rs|--lib --test=window_props"
    "near_cache|src/near_cache.rs|--lib"
    "guard|src/server/guard.rs|--lib --test=guard"
    "wire|src/store/memcached/wire.rs|--lib --test=memcached"
)
selected="${MUTANTS_GROUPS:-engine near_cache guard wire}"

# Shards write to their own directory.
suffix=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
    --shard=*) shard="${args[i]#--shard=}" ;;
    --shard) shard="${args[i + 1]:-}" ;;
    *) continue ;;
    esac
    suffix="-shard-${shard%/*}-of-${shard#*/}"
done

# Debug info only slows each mutant's link; no test needs it.
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"
# A property test that fails on a mutant would save the mutant's failing
# case into the tree (proptest-regressions/, tests/*.proptest-regressions):
# seeds of a bug the code does not have. None are read or written here.
export PROPTEST_DISABLE_FAILURE_PERSISTENCE=1
# The machine has 2 cores and is shared: stay behind interactive work.
nice_cmd=(nice -n 10)

count() { # lines of a result file, 0 when absent
    if [[ -f "$1" ]]; then grep -c . "$1" || true; else echo 0; fi
}

started=$(date +%s)
summary=()
totals=(0 0 0 0 0 0)
status=0
for entry in "${GROUPS_TABLE[@]}"; do
    IFS='|' read -r group files targets <<<"$entry"
    [[ " $selected " == *" $group "* ]] || continue
    out="target/mutants/${group}${suffix}"
    mkdir -p "$out"
    file_args=()
    for file in $files; do file_args+=(-f "$file"); done
    # The targets go to every cargo invocation (-C), not only to `cargo
    # test` (after --): otherwise the build step would build every test
    # target of the crate for each mutant.
    target_args=()
    for target in $targets; do target_args+=("--cargo-arg=$target"); done
    echo "==== $group: $files ($targets)"
    group_started=$(date +%s)
    # Exit code 2 (missed) and 3 (timeouts) are results, not failures.
    "${nice_cmd[@]}" cargo mutants --in-place --no-shuffle \
        "${file_args[@]}" "${target_args[@]}" \
        --minimum-test-timeout 120 \
        -o "$out" "$@" || status=$?
    if ((status != 0 && status != 2 && status != 3)); then
        echo "cargo mutants failed for $group (exit $status)" >&2
        exit "$status"
    fi
    status=0
    result="$out/mutants.out"
    caught=$(count "$result/caught.txt")
    missed=$(count "$result/missed.txt")
    unviable=$(count "$result/unviable.txt")
    timeouts=$(count "$result/timeout.txt")
    # With --iterate: caught or unviable in the runs before, not run again.
    earlier=$(count "$result/previously_caught.txt")
    tested=$((caught + missed + unviable + timeouts))
    seconds=$(($(date +%s) - group_started))
    summary+=("$(printf '%-11s %6d %6d %6d %6d %8d %8d %7ds' \
        "$group" "$tested" "$caught" "$missed" "$unviable" "$timeouts" "$earlier" "$seconds")")
    totals=($((totals[0] + tested)) $((totals[1] + caught)) $((totals[2] + missed)) \
        $((totals[3] + unviable)) $((totals[4] + timeouts)) $((totals[5] + earlier)))
    if [[ -s "$result/missed.txt" ]]; then
        echo "missed in $group:"
        sed 's/^/    /' "$result/missed.txt"
    fi
done

elapsed=$(($(date +%s) - started))
echo
# "tested": mutants run this time; "earlier": skipped by --iterate, caught
# or unviable in a previous run into the same directory.
printf '%-11s %6s %6s %6s %6s %8s %8s %8s\n' \
    group tested caught missed unviable timeouts earlier time
printf '%s\n' "${summary[@]}"
printf '%-11s %6d %6d %6d %6d %8d %8d %7ds\n' total "${totals[@]}" "$elapsed"
