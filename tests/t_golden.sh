#!/usr/bin/env bash
# t_golden.sh - the golden-file cases (tests/golden.sh) as one test of run_all.sh.
exec "$(dirname "$0")/golden.sh"
