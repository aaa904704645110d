#!/usr/bin/env bash
# t_torch_pending.sh - the cases of t_torch_examples.sh that wait for an
# mpcc bug fix (its PENDING_CASES, with the bug described there). Fails
# until the fix lands; then remove the case from PENDING_CASES.
exec env PENDING=run ONLY="${ONLY:-metric_alias}" "$(dirname "$0")/../t_torch_examples.sh"
