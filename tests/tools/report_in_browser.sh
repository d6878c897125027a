#!/usr/bin/env bash
# The demo's report opened by a real browser (headless Chromium): runs the
# demo sweep, writes the report, loads report.html with a small check
# appended, and fails unless every plot image decoded (natural width > 0),
# the tables are there with rows, and the browser exited cleanly. Saves a
# screenshot of the page beside the build (report-in-browser.png).
#
#   tests/tools/report_in_browser.sh BIN_DIR SOURCE_DIR OUT_DIR
#
# Exit 77 (CTest: skipped) with a message when Chromium is not installed:
# `tools/setup.sh --browser` installs it.
set -euo pipefail

bin="$1" source="$2" out="$3"
browser=""
for candidate in chromium chromium-browser google-chrome; do
  if command -v "$candidate" >/dev/null; then browser="$candidate"; break; fi
done
if [ -z "$browser" ]; then
  echo "SKIPPED: no Chromium on this machine; 'bash tools/setup.sh --browser' installs it"
  exit 77
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/dctrain-browser-XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The demo sweep's first seed (6 of its 36 runs; its CPU-quota case needs
# root, as CI has): every table and plot of
# the report, in under a minute.
echo "report_in_browser: running the demo sweep's first seed (under a minute)"
if ! "$bin/dctrain-experiment" "$source/experiments/demo.sweep" --out "$work/runs" --only _s1 \
  > "$work/sweep.log" 2>&1; then
  # Only the CPU-quota case may fail, on a machine without CPU groups.
  if ! grep -q "  failed: " "$work/sweep.log" ||
    grep "  failed: " "$work/sweep.log" | grep -vq "cpu-quota"; then
    tail -20 "$work/sweep.log"; echo "FAIL: the demo sweep did not finish"; exit 1
  fi
  echo "report_in_browser: the CPU-quota case cannot run here ($(grep -m1 "cannot be applied" \
    "$work"/runs/*cpu-quota*/launch.log | sed 's/.*: //')); the report shows the others"
fi
"$bin/dctrain-report" "$work/runs" --out "$work/report" > "$work/report.log" 2>&1 ||
  { cat "$work/report.log"; echo "FAIL: dctrain-report failed"; exit 1; }
page="$work/report/report.html"
[ -s "$page" ] || { echo "FAIL: $page is missing or empty"; exit 1; }

# A copy of the page with a check that runs once everything has loaded and
# writes its findings into the DOM, which the browser then prints.
check="$work/report/check.html"
cat > "$work/check.js" <<'EOF'
<script>
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var decoded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  var tables = Array.prototype.slice.call(document.querySelectorAll("table"));
  var rows = tables.map(function (t) { return t.rows.length; });
  var result = document.createElement("pre");
  result.id = "dctrain-check";
  result.textContent = "images=" + images.length + " decoded=" + decoded.length +
      " tables=" + tables.length + " rows=" + rows.join(",");
  document.body.appendChild(result);
});
</script>
EOF
sed -e "/<\/body>/{
r $work/check.js
}" "$page" > "$check"
grep -q 'id = "dctrain-check"' "$check" || { echo "FAIL: report.html has no </body> to add the check to"; exit 1; }

flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run
       --user-data-dir="$work/profile" --virtual-time-budget=10000)
"$browser" "${flags[@]}" --dump-dom "file://$check" > "$work/dom.html" 2> "$work/browser.log" ||
  { tail -20 "$work/browser.log"; echo "FAIL: $browser did not load the page"; exit 1; }
line="$(grep -o 'images=[0-9]* decoded=[0-9]* tables=[0-9]* rows=[0-9,]*' "$work/dom.html" || true)"
[ -n "$line" ] || { tail -20 "$work/browser.log"; echo "FAIL: the check did not run in the browser"; exit 1; }
echo "report_in_browser: $line"

read -r images decoded tables rows <<<"$(sed -E 's/images=([0-9]+) decoded=([0-9]+) tables=([0-9]+) rows=([0-9,]*)/\1 \2 \3 \4/' <<<"$line")"
in_source="$(grep -o '<img ' "$page" | wc -l)"
status=0
[ "$images" -gt 0 ] || { echo "FAIL: the page shows no plot"; status=1; }
[ "$images" -eq "$in_source" ] || { echo "FAIL: $in_source <img> in the file, $images in the page"; status=1; }
[ "$decoded" -eq "$images" ] || { echo "FAIL: only $decoded of $images plot images decoded"; status=1; }
[ "$tables" -gt 0 ] || { echo "FAIL: the page has no table"; status=1; }
for r in ${rows//,/ }; do
  [ "$r" -ge 2 ] || { echo "FAIL: a table has $r rows (a header and no cases)"; status=1; }
done

mkdir -p "$out"
"$browser" "${flags[@]}" --hide-scrollbars --window-size=1280,2400 \
  --screenshot="$out/report-in-browser.png" "file://$page" >> "$work/browser.log" 2>&1 ||
  { tail -20 "$work/browser.log"; echo "FAIL: the screenshot failed"; status=1; }
[ -s "$out/report-in-browser.png" ] && echo "report_in_browser: screenshot $out/report-in-browser.png"
[ "$status" -eq 0 ] && echo "report_in_browser: PASS"
exit "$status"
