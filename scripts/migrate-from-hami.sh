#!/usr/bin/env bash
# Switch HAMi's MutatingWebhookConfiguration over to hami-webhook's webhook in ONE write, so that no Pod is
# admitted between "HAMi's webhook only" and "ours only" (docs/migration-from-hami.md, step 3).
#
#   scripts/migrate-from-hami.sh HAMI_CONFIGURATION [--context CONTEXT] [--backup FILE] [--dry-run]
#
# Needs bash and kubectl. Ours must be installed on standby first (components/standby): its webhook is copied
# from the live configuration hami-webhook-pods, caBundle included, and its standby condition is removed in
# the same JSON patch that replaces HAMi's webhooks; the patch also tests HAMi's webhook names, so a
# configuration changed in between is refused, not half-switched. HAMi's webhooks are saved first (--backup,
# default <name>.webhooks.json here) as a merge patch that puts them back:
#   kubectl patch mutatingwebhookconfiguration NAME --type=merge --patch-file FILE
#
# Exit codes: 0 switched (or nothing to do), 1 not ready to switch (the message says why), 2 usage error,
# otherwise kubectl's own exit code with kubectl's message.
set -euo pipefail

ours="hami-webhook-pods"
usage() {
  cat >&2 <<'MSG'
usage: migrate-from-hami.sh HAMI_CONFIGURATION [--context CONTEXT] [--backup FILE] [--dry-run]
  HAMI_CONFIGURATION  HAMi's MutatingWebhookConfiguration (its webhook is vgpu.hami.io; the chart names it
                      <fullname>-webhook, e.g. hami-webhook): kubectl get mutatingwebhookconfigurations
  --context CTX       kubeconfig context to use (default: the current one; KUBECONFIG is honoured)
  --backup FILE       where HAMi's webhooks are saved (default HAMI_CONFIGURATION.webhooks.json here)
  --dry-run           check everything and send the patch with --dry-run=server: nothing changes
MSG
  [ $# -gt 0 ] && printf 'migrate-from-hami.sh: %s\n' "$1" >&2
  exit 2
}
refuse() {
  printf 'migrate-from-hami.sh: %s\n' "$1" >&2
  exit 1
}

hami=""
context=()
backup=""
dry_run=()
while [ $# -gt 0 ]; do
  case "$1" in
    --context)
      [ $# -ge 2 ] && [ -n "$2" ] || usage "--context needs a value"
      context=(--context "$2")
      shift
      ;;
    --context=?*) context=(--context "${1#--context=}") ;;
    --backup)
      [ $# -ge 2 ] && [ -n "$2" ] || usage "--backup needs a value"
      backup="$2"
      shift
      ;;
    --backup=?*) backup="${1#--backup=}" ;;
    --dry-run) dry_run=(--dry-run=server) ;;
    -h | --help) usage ;;
    -*) usage "unexpected option: '$1'" ;;
    *)
      [ -z "$hami" ] || usage "one configuration only"
      hami="$1"
      ;;
  esac
  shift
done
[ -n "$hami" ] || usage "name HAMi's MutatingWebhookConfiguration"
[ "$hami" != "$ours" ] || usage "$ours is hami-webhook's own configuration, not HAMi's"
backup="${backup:-$hami.webhooks.json}"

kube() { kubectl ${context[@]+"${context[@]}"} "$@"; }
get() { kube get mutatingwebhookconfiguration "$1" -o jsonpath="$2"; }

# Ours: exactly one webhook, on standby, with a CA bundle.
names="$(get "$ours" '{.webhooks[*].name}')" || exit $?
[ "$names" = "pods.hami.io" ] || refuse "$ours should hold the one webhook pods.hami.io, holds: '$names'"
ca="$(get "$ours" '{.webhooks[0].clientConfig.caBundle}')" || exit $?
[ -n "$ca" ] ||
  refuse "$ours has no caBundle yet: wait for the certgen Job (or cert-manager) to write it, then run this again"
standby=""
index=0
for condition in $(get "$ours" '{.webhooks[0].matchConditions[*].name}'); do
  [ "$condition" = "standby" ] && standby="$index"
  index=$((index + 1))
done
[ -n "$standby" ] || refuse "$ours is not on standby (it is already called): install it with components/standby first"
webhooks="$(get "$ours" '{.webhooks}')" || exit $?

# HAMi's: saved, and its webhook names tested in the patch.
hooks="$(get "$hami" '{.webhooks[*].name}')" || exit $?
if [ "$hooks" = "pods.hami.io" ]; then
  echo "mutatingwebhookconfiguration/$hami already holds pods.hami.io only: nothing to do"
  exit 0
fi
saved="$(get "$hami" '{.webhooks}')" || exit $?
ops=()
index=0
for hook in $hooks; do
  ops+=("{\"op\":\"test\",\"path\":\"/webhooks/$index/name\",\"value\":\"$hook\"}")
  index=$((index + 1))
done
ops+=("{\"op\":\"replace\",\"path\":\"/webhooks\",\"value\":$webhooks}")
ops+=("{\"op\":\"test\",\"path\":\"/webhooks/0/matchConditions/$standby/name\",\"value\":\"standby\"}")
ops+=("{\"op\":\"remove\",\"path\":\"/webhooks/0/matchConditions/$standby\"}")
patch="[$(IFS=,; echo "${ops[*]}")]"

if [ ${#dry_run[@]} -eq 0 ]; then
  printf '{"webhooks":%s}\n' "$saved" >"$backup"
  echo "saved HAMi's webhooks ($hooks) to $backup"
fi
after="$(kube patch mutatingwebhookconfiguration "$hami" --type=json -p "$patch" ${dry_run[@]+"${dry_run[@]}"} \
  -o jsonpath='{.webhooks[*].name}')" || exit $?
echo "mutatingwebhookconfiguration/$hami${dry_run[*]:+ (dry run: nothing changed)}: webhooks $hooks -> $after"
if [ ${#dry_run[@]} -eq 0 ]; then
  cat <<MSG
Every device Pod is now reviewed by hami-webhook, through $hami. Next (docs/migration-from-hami.md):
  4. apply your overlay without components/standby (hami-webhook-pods is then called too; a second review
     of our own output changes nothing)
  5. helm upgrade HAMi with --set scheduler.admissionWebhook.enabled=false (removes $hami)
To undo before step 5: kubectl patch mutatingwebhookconfiguration $hami --type=merge --patch-file $backup
MSG
fi
