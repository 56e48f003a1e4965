"""The ui page: a form, a chart and the answers. The script only sends the form to the API and draws what comes
back (the figure is the report's, built server-side); no physics is computed in the browser."""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tokenroof ui</title>
<link rel="icon" href="data:,">
<script src="/plotly.min.js"></script>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; }
header { padding: 10px 20px; background: #f4f4f4; border-bottom: 1px solid #ddd; }
main { display: grid; grid-template-columns: 300px 1fr; gap: 20px; padding: 16px 20px; }
form label { display: block; margin: 8px 0 2px; font-weight: 600; }
form input, form select { width: 100%; box-sizing: border-box; } form input[type=checkbox] { width: auto; }
fieldset { border: 1px solid #ddd; margin: 0 0 12px; } .row { display: flex; gap: 8px; } .row > div { flex: 1; }
#chart { width: 100%; height: 440px; } #status { color: #666; min-height: 1.4em; } #status.error { color: #b00020; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; } dt { font-weight: 600; } dd { margin: 0; }
code, #flags { font-family: monospace; white-space: pre-line; } .warn { color: #8a5a00; margin: 2px 0; }
</style></head><body>
<header><strong>tokenroof ui</strong>: decode TPOT and throughput against the running batch, from first principles
and from your measurements</header>
<main>
<form id="form" onsubmit="return false">
<fieldset><legend>First principles</legend>
<label for="model">model</label><select id="model"></select>
<label for="model-config">or a config.json</label><input id="model-config" type="file" accept=".json">
<label for="hardware">hardware</label><select id="hardware"></select>
<div class="row"><div><label for="dtype">dtype</label><select id="dtype"></select></div>
<div><label for="kv-dtype">KV dtype</label>
<select id="kv-dtype"><option value="">as weights</option></select></div></div>
<div class="row"><div><label for="tp">TP</label><input id="tp" type="number" min="1" step="1" value="1"></div>
<div><label for="context">context (tokens)</label><input id="context" type="number" min="0" value="1024"></div></div>
<div class="row"><div><label for="batch-min">batch from</label>
<input id="batch-min" type="number" min="1" value="1"></div>
<div><label for="batch-max">to</label><input id="batch-max" type="number" min="2" value="512"></div></div>
</fieldset>
<fieldset><legend>Your measurements</legend>
<label for="measurements">CSV or JSON (as predict reads)</label>
<input id="measurements" type="file" accept=".csv,.json,.jsonl">
<label><input id="prior" type="checkbox"> fit with the physics prior (model, hardware, context above)</label>
<button id="clear-table" type="button">forget the file</button>
</fieldset>
<fieldset><legend>Advice</legend>
<label for="tpot-slo">TPOT target (ms)</label><input id="tpot-slo" type="number" min="0.001" value="50">
</fieldset>
</form>
<div>
<div id="status"></div>
<div id="chart"></div>
<dl>
<dt>knee</dt><dd id="knee">—</dd><dt>critical batch</dt><dd id="critical">—</dd>
<dt>memory cap</dt><dd id="memory-cap">—</dd><dt>throughput asymptote</dt><dd id="asymptote">—</dd>
<dt>fit</dt><dd id="fit">no measurements loaded</dd>
<dt>advised max_num_seqs</dt><dd id="cap">—</dd><dt>engine flags</dt><dd id="flags">—</dd>
</dl>
<div id="warnings"></div>
</div>
</main>
<script>
const $ = (id) => document.getElementById(id);
const state = { table: null, modelConfig: null, seq: 0, answers: {} };
window.tokenroof = state;
const fmt = (v) => (v === null || v === undefined)
  ? "—" : Number(v).toLocaleString(undefined, {maximumSignificantDigits: 4});

async function post(path, body, seq) {
  const headers = {"Content-Type": "application/json"};
  for (let tries = 0; ; tries++) {
    const r = await fetch(path, {method: "POST", headers, body: JSON.stringify(body)});
    const data = await r.json();
    if (r.status === 429 && tries < 20 && seq === state.seq) {  // the server is busy with an earlier update
      await new Promise((done) => setTimeout(done, 250));
      continue;
    }
    if (!r.ok) throw new Error((data.error && data.error.message) || r.statusText);
    return data;
  }
}

function fill(select, names, chosen) {
  select.innerHTML = names.map((n) => `<option${n === chosen ? " selected" : ""}>${n}</option>`).join("");
}

function form() {
  const upload = $("model").value === "uploaded config.json";
  return {
    model: upload ? null : $("model").value, model_config: upload ? state.modelConfig : null,
    hardware: $("hardware").value, dtype: $("dtype").value || null, kv_dtype: $("kv-dtype").value || null,
    tp: Number($("tp").value), context: Number($("context").value),
    batch_min: Number($("batch-min").value), batch_max: Number($("batch-max").value),
    table: state.table, prior: $("prior").checked, tpot_slo_ms: Number($("tpot-slo").value),
  };
}

function status(text, error) { $("status").textContent = text; $("status").className = error ? "error" : ""; }

function show(a) {
  const r = a.roofline, p = a.predict, d = a.advise;
  $("knee").textContent = fmt(r.knee_batch);
  $("critical").textContent = r.critical_batch === null ? (r.critical_batch_reason || "—") : fmt(r.critical_batch);
  $("memory-cap").textContent = fmt(r.max_batch_by_memory);
  $("asymptote").textContent = fmt(r.throughput_asymptote_tok_s) + " tok/s";
  const rms = p && fmt(100 * p.model.residual_rms_relative);
  const fit = p && `${p.model.method}, ${p.model.points_fitted} points, rms ${rms}%`;
  $("fit").textContent = fit || "no measurements loaded";
  $("cap").textContent = d ? `${d.max_num_seqs} (${d.binding})` : (a.adviseError || "—");
  $("flags").textContent = d ? Object.entries(d.engine_flags).map(([k, v]) => `${k}: ${v}`).join("\\n") : "—";
  const warnings = [...(r.warnings || []), ...(p ? p.warnings : []), ...(d ? d.warnings : [])];
  $("warnings").innerHTML = "";
  for (const w of warnings) {
    const el = document.createElement("p");
    el.className = "warn";
    el.textContent = w;
    $("warnings").append(el);
  }
}

async function update() {
  const seq = ++state.seq, body = form(), answers = {};
  status("computing…");
  try {
    answers.roofline = await post("/api/roofline", body, seq);
    if (state.table) answers.predict = await post("/api/predict", body, seq);
    try { answers.advise = await post("/api/advise", body, seq); } catch (e) { answers.adviseError = e.message; }
    const figure = await post("/api/figure", {...answers, table_name: state.table && state.table.name}, seq);
    if (seq !== state.seq) return;
    await Plotly.react("chart", figure.data, figure.layout, {responsive: true, displaylogo: false});
    state.answers = answers;
    show(answers);
    status(answers.adviseError ? "advice: " + answers.adviseError : "");
  } catch (e) {
    if (seq === state.seq) status(e.message, true);
  }
}

let timer = null;
function soon() { clearTimeout(timer); timer = setTimeout(update, 200); }

async function readFile(input) {
  return input.files.length ? {name: input.files[0].name, text: await input.files[0].text()} : null;
}

$("model-config").addEventListener("change", async (e) => {
  const file = await readFile(e.target);
  state.modelConfig = file && file.text;
  const known = [...$("model").options].some((o) => o.value === "uploaded config.json");
  if (file && !known) $("model").add(new Option("uploaded config.json"));
  if (file) $("model").value = "uploaded config.json";
  soon();
});
$("measurements").addEventListener("change", async (e) => { state.table = await readFile(e.target); soon(); });
$("clear-table").addEventListener("click", () => { state.table = null; $("measurements").value = ""; soon(); });
for (const el of document.querySelectorAll("#form select, #form input:not([type=file])")) {
  el.addEventListener("input", soon); el.addEventListener("change", soon);
}

(async () => {
  const presets = await (await fetch("/api/presets")).json();
  fill($("model"), presets.models, "llama-3.1-8b");
  fill($("hardware"), presets.hardware, "h100-sxm");
  fill($("dtype"), presets.dtypes, "");
  $("dtype").add(new Option("as the checkpoint (else bf16)", ""), 0);
  $("dtype").value = "";
  for (const d of presets.dtypes) $("kv-dtype").add(new Option(d));
  await update();
})();
</script>
</body></html>
"""
