#!/usr/bin/env bash
# Emergency switch: set failurePolicy on EVERY webhook of a MutatingWebhookConfiguration.
#
#   scripts/emergency-failure-policy.sh Ignore|Fail [--name NAME] [--context CONTEXT] [--dry-run]
#
# Needs only bash and kubectl, so it works while the webhook (and Python) are down: kube-apiserver never
# sends webhook-configuration writes to admission webhooks. One JSON patch sets every webhook's policy and
# tests every webhook's name first, so a configuration edited in between fails the patch instead of being
# half-switched. --dry-run sends the same patch with --dry-run=server: checked, nothing changed.
#
# The admission policies keep their promise too (docs/operations.md, "Admission policies"): the policy
# hami-webhook-routed denies device Pods stored on default-scheduler, which under Ignore with the webhook down is
# every device Pod unless the floor (MutatingAdmissionPolicy hami-webhook-floor, Kubernetes 1.36+) routes them in
# process. So where the floor is absent, Ignore also turns the routed binding's Deny into Warn+Audit, and Fail
# (or the floor present) puts Deny back. Without the routed binding installed, nothing more is done.
#
# The workloads' configuration (ValidatingWebhookConfiguration hami-webhook-workloads) is left alone: it is
# failurePolicy Ignore already and only ever warns (or, with HAMI_WORKLOAD_CHECKS=deny, refuses templates whose every
# Pod would be refused anyway), so an outage of the webhook never blocks a workload through it.
#
# Exit codes: 0 done (also when nothing had to change), 2 usage error, otherwise kubectl's own exit code,
# with kubectl's message on stderr (no such configuration, no permission, unreachable cluster).
set -euo pipefail

usage() {
  cat >&2 <<'EOF'
usage: emergency-failure-policy.sh Ignore|Fail [--name NAME] [--context CONTEXT] [--dry-run]
  Ignore|Fail       the failurePolicy to set on every webhook of the configuration (case-sensitive)
  --name NAME       MutatingWebhookConfiguration name (default: hami-webhook-pods)
  --context CTX     kubeconfig context to use (default: the current one; KUBECONFIG is honoured)
  --dry-run         show what would change, change nothing (server-side dry run)
The workloads' ValidatingWebhookConfiguration (hami-webhook-workloads) is never changed: it fails open already.
EOF
  [ $# -gt 0 ] && printf 'emergency-failure-policy.sh: %s\n' "$1" >&2
  exit 2
}

policy=""
name="hami-webhook-pods"
context=()
dry_run=()
while [ $# -gt 0 ]; do
  case "$1" in
    Ignore | Fail)
      [ -z "$policy" ] || usage "the policy is given twice"
      policy="$1"
      ;;
    --name)
      [ $# -ge 2 ] && [ -n "$2" ] || usage "--name needs a value"
      name="$2"
      shift
      ;;
    --name=?*) name="${1#--name=}" ;;
    --context)
      [ $# -ge 2 ] && [ -n "$2" ] || usage "--context needs a value"
      context=(--context "$2")
      shift
      ;;
    --context=?*) context=(--context "${1#--context=}") ;;
    --dry-run) dry_run=(--dry-run=server) ;;
    -h | --help) usage ;;
    *) usage "unexpected argument: '$1' (the policy must be Ignore or Fail)" ;;
  esac
  shift
done
[ -n "$policy" ] || usage "give the policy: Ignore or Fail"

kube() { kubectl ${context[@]+"${context[@]}"} "$@"; }

# One "name|policy" line per webhook, in order ('|' is never part of a webhook name). v1 defaults a
# missing failurePolicy to Fail.
policies() {
  "$@" -o jsonpath='{range .webhooks[*]}{.name}{"|"}{.failurePolicy}{"\n"}{end}'
}

before="$(policies kube get mutatingwebhookconfiguration "$name")" || exit $?
if [ -z "$before" ]; then
  echo "mutatingwebhookconfiguration/$name has no webhooks: nothing to change"
  exit 0
fi

ops=()
index=0
while IFS='|' read -r hook _; do
  ops+=("{\"op\":\"test\",\"path\":\"/webhooks/$index/name\",\"value\":\"$hook\"}")
  ops+=("{\"op\":\"add\",\"path\":\"/webhooks/$index/failurePolicy\",\"value\":\"$policy\"}")
  index=$((index + 1))
done <<<"$before"
patch="[$(IFS=,; echo "${ops[*]}")]"

after="$(policies kube patch mutatingwebhookconfiguration "$name" --type=json -p "$patch" ${dry_run[@]+"${dry_run[@]}"})" ||
  exit $?

# No mapfile: macOS still ships bash 3.2.
old=()
new=()
while IFS= read -r line; do old+=("$line"); done <<<"$before"
while IFS= read -r line; do new+=("$line"); done <<<"$after"
echo "mutatingwebhookconfiguration/$name${dry_run[*]:+ (dry run: nothing changed)}:"
for i in "${!old[@]}"; do
  was="${old[$i]#*|}"
  now="${new[$i]:-}"
  now="${now#*|}"
  echo "  ${old[$i]%%|*}: failurePolicy ${was:-Fail} -> ${now:-Fail}"
done

# The routed policy's binding in the webhook's scope: Deny, or Warn+Audit while an outage under Ignore would
# otherwise refuse every device Pod. An API server without MutatingAdmissionPolicy (before 1.32) has no floor.
routed="hami-webhook-routed"
actions="$(kube get validatingadmissionpolicybinding "$routed" --ignore-not-found \
  -o jsonpath='{range .spec.validationActions[*]}{@}{","}{end}')" || exit $?
[ -n "$actions" ] || exit 0
floor="$(kube get mutatingadmissionpolicybinding hami-webhook-floor --ignore-not-found -o name 2>/dev/null || true)"
if [ "$policy" = Ignore ] && [ -z "$floor" ]; then
  want='["Warn","Audit"]'
  why="no floor: device Pods are admitted unrouted, with a warning"
else
  want='["Deny"]'
  why="${floor:+the floor routes device Pods}"
  [ "$policy" = Fail ] && why="device Pods past the webhook are refused"
fi
now="$(kube patch validatingadmissionpolicybinding "$routed" --type=json ${dry_run[@]+"${dry_run[@]}"} \
  -p "[{\"op\":\"replace\",\"path\":\"/spec/validationActions\",\"value\":$want}]" \
  -o jsonpath='{range .spec.validationActions[*]}{@}{","}{end}')" || exit $?
echo "validatingadmissionpolicybinding/$routed${dry_run[*]:+ (dry run: nothing changed)}:"
echo "  validationActions ${actions%,} -> ${now%,} ($why)"
