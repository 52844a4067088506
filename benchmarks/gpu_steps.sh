# Sourced by benchmarks/gpu_population.sh and benchmarks/gpu_resnet.sh (with $out set): the carried wheels
# installed into /tmp/site once (.whl/, see gpu_population.sh's header), and step SECONDS TITLE COMMAND..., which
# appends the command and its output to $out as a Markdown section, with its exit status, seconds and limit.
if [ -d /tmp/site/pydantic ]; then
  export PYTHONPATH=/tmp/site:$PWD
elif ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONPATH="${PYTHONPATH:-$PWD}"
step() {  # step SECONDS TITLE COMMAND...
  local limit=$1 title=$2; shift 2
  { echo; echo "## $title"; echo; echo '```'; echo "\$ $*"; } >> "$out"
  local start=$SECONDS
  timeout "$limit" "$@" >> "$out" 2>&1; local rc=$?
  { echo "(exit $rc, $((SECONDS - start)) s, limit $limit s)"; echo '```'; } >> "$out"
}
