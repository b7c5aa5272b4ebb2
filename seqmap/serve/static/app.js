// The seqmap page: translate (or generate, classify, transcribe) through the server's API and explore attention.
//
// Attention arrives as weights[layer][head][output token][source token] (see /docs, the
// Attention schema). The page shows one (output x source) map at a time: one head of one
// layer, or the average over heads and/or layers. Hovering over an output token marks the
// source tokens whose weight is at least HIGHLIGHT of that row's largest with the class
// "attended" (and the largest with "attended-max"). A speech model's attention is over encoder
// frames instead of source tokens: the page draws it on a canvas under the spectrogram.
"use strict";

const HIGHLIGHT = 0.5; // fraction of a row's largest weight that counts as "attended"
const AVERAGE = "avg";

const state = {
  info: null, // GET /info
  results: [], // translations (or the one generation) of the last request
  selected: 0, // which result the heatmap shows
  matrix: null, // the (output x source) map on screen
  transcription: null, // a speech model's answer for the uploaded audio file
  speechMatrix: null, // its (output x encoder frame) map on the canvas
};

const $ = (id) => document.getElementById(id);

async function api(path, body) {
  const response = await fetch(path, body === undefined ? {} : {
    method: "POST",
    headers: {"content-type": "application/json"},
    body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({detail: `HTTP ${response.status}`}));
  if (!response.ok) {
    throw new Error(data.detail || `HTTP ${response.status}`);
  }
  return data;
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

// -- setup from /info --------------------------------------------------------------------------

async function init() {
  try {
    state.info = await api("/info");
  } catch (error) {
    showError(`cannot read /info: ${error.message}`);
    return;
  }
  const info = state.info;
  if (info.endpoint === "/classify") {
    initClassify(info);
    return;
  }
  if (info.endpoint === "/transcribe") {
    initSpeech(info);
    return;
  }
  const langs = info.languages;
  const task = info.endpoint === "/generate" ? "language model" : `${langs.source} → ${langs.target}`;
  $("model-info").textContent = `${info.family} ${task} · ${info.parameters.toLocaleString("en")} parameters · ` +
    `${info.vocabulary.tokenizer} vocabulary ${info.vocabulary.target}` +
    (info.step === null ? "" : ` · step ${info.step}`) +
    (info.decoder && info.decoder !== "seqmap" ? ` · searched by ${info.decoder}` : "");
  const decode = info.decode_defaults;
  if (info.endpoint === "/generate") {
    $("generate-panel").hidden = false;
    $("max-new-tokens").value = Math.min(decode.max_new_tokens, info.limits.max_new_tokens);
    $("max-new-tokens").max = info.limits.max_new_tokens;
    $("temperature").value = decode.temperature;
    $("top-k").value = decode.top_k;
    $("top-p").value = decode.top_p;
    $("generate-form").addEventListener("submit", onGenerate);
  } else {
    $("translate-panel").hidden = false;
    $("beam-size").value = decode.beam_size;
    $("beam-size").max = info.limits.max_beam;
    $("length-penalty").value = decode.length_penalty;
    $("translate-form").addEventListener("submit", onTranslate);
  }
  fillSelect($("layer-select"), info.attention.layers, info.attention.layers - 1, "layer");
  fillSelect($("head-select"), info.attention.heads, AVERAGE, "head");
  $("layer-select").addEventListener("change", drawAttention);
  $("head-select").addEventListener("change", drawAttention);
}

function fillSelect(select, count, chosen, noun) {
  select.replaceChildren();
  const options = [[AVERAGE, `average of ${noun}s`]];
  for (let i = 0; i < count; i++) options.push([String(i), `${noun} ${i}`]);
  for (const [value, label] of options) {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = label;
    option.selected = value === String(chosen);
    select.append(option);
  }
}

// -- requests ----------------------------------------------------------------------------------

async function onTranslate(event) {
  event.preventDefault();
  const texts = $("source-text").value.split("\n").map((t) => t.trim()).filter((t) => t);
  if (!texts.length) {
    showError("type a sentence to translate");
    return;
  }
  const body = {
    text: texts,
    beam_size: Number($("beam-size").value),
    n_best: Number($("n-best").value),
    length_penalty: Number($("length-penalty").value),
    attention: state.info.attention.available,
  };
  await run("/translate", body, (data) => data.translations, "translate-button");
}

async function onGenerate(event) {
  event.preventDefault();
  const body = {
    prompt: $("prompt-text").value,
    max_new_tokens: Number($("max-new-tokens").value),
    sample: $("sample").checked,
    temperature: Number($("temperature").value),
    top_k: Number($("top-k").value),
    top_p: Number($("top-p").value),
    seed: Number($("seed").value),
    attention: state.info.attention.available,
  };
  await run("/generate", body, (data) => [data], "generate-button");
}

async function run(path, body, results, buttonId) {
  const button = $(buttonId);
  button.disabled = true;
  showError("");
  $("status").textContent = "working...";
  const start = performance.now();
  try {
    state.results = results(await api(path, body));
    state.selected = 0;
    $("status").textContent = `answered in ${Math.round(performance.now() - start)} ms`;
    showResults();
  } catch (error) {
    $("status").textContent = "";
    showError(error.message);
  } finally {
    button.disabled = false;
  }
}

// -- output ------------------------------------------------------------------------------------

function showResults() {
  $("output").hidden = false;
  const list = $("translations");
  list.replaceChildren();
  const generation = state.info.endpoint === "/generate";
  list.hidden = generation;
  $("generated").hidden = !generation;
  if (generation) {
    const result = state.results[0];
    $("generated").querySelector(".prompt").textContent = result.prompt;
    $("generated-text").textContent = result.text;
  } else {
    state.results.forEach((result, i) => {
      const item = document.createElement("li");
      item.className = "translation-item" + (i === state.selected ? " selected" : "");
      item.title = "show the attention of this translation";
      const source = document.createElement("div");
      source.className = "source muted";
      source.textContent = result.source;
      const text = document.createElement("div");
      text.className = "translation";
      text.textContent = result.translation;
      item.append(source, text);
      if (result.nbest.length > 1) {
        const nbest = document.createElement("ol");
        nbest.className = "nbest";
        for (const entry of result.nbest) {
          const line = document.createElement("li");
          line.textContent = `${entry.text}   (${entry.normalized.toFixed(3)})`;
          nbest.append(line);
        }
        item.append(nbest);
      }
      item.addEventListener("click", () => {
        state.selected = i;
        list.querySelectorAll(".translation-item").forEach((el, j) => el.classList.toggle("selected", j === i));
        drawAttention();
      });
      list.append(item);
    });
  }
  drawAttention();
}

// -- attention ---------------------------------------------------------------------------------

function chosenMap(attention, layerValue = $("layer-select").value, headValue = $("head-select").value) {
  // The (T x S) map for the layer and head selectors: one of them, or a mean. S: source tokens, or a
  // speech model's encoder frames.
  const layers = layerValue === AVERAGE ? [...Array(attention.layers).keys()] : [Number(layerValue)];
  const heads = headValue === AVERAGE ? [...Array(attention.heads).keys()] : [Number(headValue)];
  const rows = attention.output_tokens.length;
  const cols = attention.source_tokens ? attention.source_tokens.length : attention.frames;
  const map = Array.from({length: rows}, () => new Array(cols).fill(0));
  for (const l of layers) {
    for (const h of heads) {
      const w = attention.weights[l][h];
      for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) map[i][j] += w[i][j];
    }
  }
  const n = layers.length * heads.length;
  return map.map((row) => row.map((v) => v / n));
}

function label(token) {
  return token.trim() === "" ? "␣".repeat(Math.max(token.length, 1)) : token;
}

function tokenSpan(token, cls, index) {
  const span = document.createElement("span");
  span.className = cls;
  span.dataset.index = String(index);
  span.textContent = label(token);
  return span;
}

function drawAttention() {
  const result = state.results[state.selected];
  const attention = result && result.attention;
  $("attention-panel").hidden = !attention;
  if (!attention) return;
  const map = chosenMap(attention);
  state.matrix = map;
  const vmax = Math.max(1e-9, ...map.flat());

  $("source-tokens").replaceChildren(...attention.source_tokens.map((t, j) => tokenSpan(t, "src-token", j)));
  $("output-tokens").replaceChildren(...attention.output_tokens.map((t, i) => tokenSpan(t, "out-token", i)));

  const table = $("heatmap");
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  head.append(document.createElement("th"));
  attention.source_tokens.forEach((t, j) => {
    const th = document.createElement("th");
    th.className = "col-head";
    th.dataset.col = String(j);
    th.append(tokenSpan(t, "src-token", j));
    head.append(th);
  });
  const body = table.createTBody();
  attention.output_tokens.forEach((t, i) => {
    const row = body.insertRow();
    row.dataset.row = String(i);
    const th = document.createElement("th");
    th.className = "row-head";
    th.append(tokenSpan(t, "out-token", i));
    row.append(th);
    map[i].forEach((w, j) => {
      const cell = row.insertCell();
      cell.className = "cell";
      cell.dataset.row = String(i);
      cell.dataset.col = String(j);
      cell.style.backgroundColor = `rgba(29, 78, 216, ${(w / vmax).toFixed(3)})`;
      cell.title = `${label(t)} → ${label(attention.source_tokens[j])}: ${w.toFixed(3)}`;
    });
  });
  document.querySelectorAll("#attention-panel .out-token").forEach((el) => {
    el.addEventListener("mouseenter", () => highlight(Number(el.dataset.index)));
    el.addEventListener("mouseleave", () => highlight(null));
  });
  table.querySelectorAll("td.cell").forEach((el) => {
    el.addEventListener("mouseenter", () => highlight(Number(el.dataset.row)));
    el.addEventListener("mouseleave", () => highlight(null));
  });
}

function highlight(row) {
  // Mark output token `row` and the source tokens it attends to (null clears every mark).
  const panel = $("attention-panel");
  panel.querySelectorAll(".attended, .attended-max, .active").forEach((el) => {
    el.classList.remove("attended", "attended-max", "active");
  });
  panel.querySelectorAll("tr.active-row").forEach((el) => el.classList.remove("active-row"));
  if (row === null || !state.matrix) {
    $("hover-info").textContent = "";
    return;
  }
  const weights = state.matrix[row];
  const best = weights.indexOf(Math.max(...weights));
  panel.querySelectorAll(`.out-token[data-index="${row}"]`).forEach((el) => el.classList.add("active"));
  panel.querySelectorAll(`tr[data-row="${row}"]`).forEach((el) => el.classList.add("active-row"));
  weights.forEach((w, j) => {
    if (w < HIGHLIGHT * weights[best]) return;
    panel.querySelectorAll(`.src-token[data-index="${j}"]`).forEach((el) => {
      el.classList.add("attended");
      if (j === best) el.classList.add("attended-max");
    });
  });
  const tokens = state.results[state.selected].attention;
  $("hover-info").textContent = `${label(tokens.output_tokens[row])} attends most to ` +
    `${label(tokens.source_tokens[best])} (${weights[best].toFixed(3)})`;
}

// -- classifiers: texts or an uploaded image -------------------------------------------------------

function initClassify(info) {
  const what = info.reads === "image" ? `images ${info.input.width}x${info.input.height}` : "texts";
  $("model-info").textContent = `${info.family} classifier of ${what} · ${info.classes.length} classes · ` +
    `${info.parameters.toLocaleString("en")} parameters` + (info.step === null ? "" : ` · step ${info.step}`);
  $("classify-panel").hidden = false;
  if (info.reads === "image") {
    $("classify-label").textContent = "Image to classify";
    $("classify-label").htmlFor = "classify-image";
    $("classify-text").hidden = true;
    $("classify-image").hidden = false;
  }
  $("classify-top").max = info.classes.length;
  $("classify-top").value = Math.min(5, info.classes.length);
  $("classify-form").addEventListener("submit", onClassify);
  $("map-select").addEventListener("change", drawClassAttention);
}

function readAsDataURL(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(new Error(`cannot read ${file.name}`));
    reader.readAsDataURL(file);
  });
}

async function onClassify(event) {
  event.preventDefault();
  showError("");
  const body = {top: Number($("classify-top").value), attention: state.info.attention.available};
  if (state.info.reads === "image") {
    const file = $("classify-image").files[0];
    if (!file) {
      showError("choose an image file first");
      return;
    }
    body.image = await readAsDataURL(file);
    state.imageURL = body.image;
  } else {
    body.text = $("classify-text").value;
  }
  $("classify-button").disabled = true;
  $("status").textContent = "classifying...";
  try {
    const data = await api("/classify", body);
    state.classification = data.classifications[0];
    showClassification();
  } catch (error) {
    showError(error.message);
  } finally {
    $("classify-button").disabled = false;
    $("status").textContent = "";
  }
}

function showClassification() {
  const result = state.classification;
  const list = $("classes");
  list.replaceChildren();
  for (const score of result.top) {
    const item = document.createElement("li");
    item.className = "class-item";
    item.textContent = `${score.label} ${score.probability.toFixed(3)}`;
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.width = `${Math.round(200 * score.probability)}px`;
    item.appendChild(bar);
    list.appendChild(item);
  }
  $("prediction-panel").hidden = false;
  drawClassAttention();
}

function drawClassAttention() {
  const attention = state.classification && state.classification.attention;
  $("token-weights").replaceChildren();
  $("image-attention").hidden = true;
  if (!attention) {
    return;
  }
  const weights = attention[$("map-select").value];
  const top = Math.max(...weights, 1e-12);
  if (attention.tokens) {
    attention.tokens.forEach((token, i) => {
      const span = document.createElement("span");
      span.className = "weighted-token";
      span.textContent = label(token);
      span.title = weights[i].toFixed(4);
      span.dataset.weight = weights[i];
      span.style.background = `rgba(245, 158, 11, ${(weights[i] / top).toFixed(3)})`;
      $("token-weights").appendChild(span);
    });
    return;
  }
  const canvas = $("image-attention");
  const context = canvas.getContext("2d");
  const [rows, cols] = attention.grid;
  const image = new Image();
  image.onload = () => {
    context.imageSmoothingEnabled = false;
    context.drawImage(image, 0, 0, canvas.width, canvas.height);
    const w = canvas.width / cols, h = canvas.height / rows;
    weights.forEach((value, i) => {
      context.fillStyle = `rgba(245, 158, 11, ${(0.75 * value / top).toFixed(3)})`;
      context.fillRect((i % cols) * w, Math.floor(i / cols) * h, w, h);
    });
    canvas.dataset.drawn = "1";
  };
  canvas.hidden = false;
  canvas.dataset.drawn = "";
  image.src = state.imageURL;
}

// -- speech: an uploaded audio file, its spectrogram and each token's attention over it -------------

const SPEECH = {left: 90, right: 12, spectrogram: 150, gap: 6, row: 22, axis: 26};
const MAGMA = [[0, 0, 4], [81, 18, 124], [183, 55, 121], [252, 137, 97], [252, 253, 191]]; // low to high

function initSpeech(info) {
  const encoder = info.sizes.conformer ? "Conformer" : "Transformer";
  $("model-info").textContent = `${encoder} speech recognizer · ${info.audio.sample_rate} Hz audio · ` +
    `${info.parameters.toLocaleString("en")} parameters · ${info.vocabulary.tokenizer} vocabulary ` +
    `${info.vocabulary.target}` + (info.step === null ? "" : ` · step ${info.step}`);
  $("transcribe-panel").hidden = false;
  $("transcribe-beam").value = info.decode_defaults.beam_size;
  $("transcribe-beam").max = info.limits.max_beam;
  $("transcribe-form").addEventListener("submit", onTranscribe);
  fillSelect($("speech-layer-select"), info.attention.layers, info.attention.layers - 1, "layer");
  fillSelect($("speech-head-select"), info.attention.heads, AVERAGE, "head");
  $("speech-layer-select").addEventListener("change", () => speechHighlight(null, true));
  $("speech-head-select").addEventListener("change", () => speechHighlight(null, true));
  const canvas = $("speech-attention");
  canvas.addEventListener("mousemove", (event) => speechHighlight(speechRowAt(canvas, event)));
  canvas.addEventListener("mouseleave", () => speechHighlight(null));
}

async function onTranscribe(event) {
  event.preventDefault();
  showError("");
  const file = $("transcribe-audio").files[0];
  if (!file) {
    showError("choose an audio file first");
    return;
  }
  const audio = await readAsDataURL(file);
  const body = {audio: [audio], beam_size: Number($("transcribe-beam").value), attention: true};
  $("transcribe-button").disabled = true;
  $("status").textContent = "transcribing...";
  const start = performance.now();
  try {
    const data = await api("/transcribe", body);
    state.transcription = data.transcriptions[0];
    $("speech-audio").src = audio;
    $("status").textContent = `answered in ${Math.round(performance.now() - start)} ms`;
    showTranscription();
  } catch (error) {
    $("status").textContent = "";
    showError(error.message);
  } finally {
    $("transcribe-button").disabled = false;
  }
}

function showTranscription() {
  const result = state.transcription;
  $("speech-panel").hidden = false;
  $("transcript").textContent = result.transcript;
  $("transcript-score").textContent = `${result.seconds.toFixed(2)} s of audio · score ${result.score.toFixed(3)} ` +
    `(normalized ${result.normalized.toFixed(3)})`;
  const tokens = result.attention.output_tokens;
  $("speech-tokens").replaceChildren(...tokens.map((t, i) => tokenSpan(t, "out-token", i)));
  $("speech-tokens").querySelectorAll(".out-token").forEach((el) => {
    el.addEventListener("mouseenter", () => speechHighlight(Number(el.dataset.index)));
    el.addEventListener("mouseleave", () => speechHighlight(null));
  });
  drawSpeech();
}

function magma(x) {
  // A colour for x in [0, 1] on a magma-like scale (the colours of `seqmap plot attention --audio`'s spectrogram).
  const at = Math.min(Math.max(x, 0), 1) * (MAGMA.length - 1);
  const i = Math.min(Math.floor(at), MAGMA.length - 2);
  const f = at - i;
  const [a, b] = [MAGMA[i], MAGMA[i + 1]];
  return `rgb(${[0, 1, 2].map((k) => Math.round(a[k] + f * (b[k] - a[k]))).join(",")})`;
}

function speechLayout(canvas) {
  // Pixels per second and where the attention rows start: the spectrogram and the rows share the time axis.
  const result = state.transcription;
  const width = canvas.width - SPEECH.left - SPEECH.right;
  return {x: (seconds) => SPEECH.left + seconds * width / result.seconds, top: SPEECH.spectrogram + SPEECH.gap};
}

function drawSpeech(highlightRow = null) {
  const result = state.transcription;
  if (!result || !result.attention) return;
  const attention = result.attention;
  const spec = attention.spectrogram;
  const map = chosenMap(attention, $("speech-layer-select").value, $("speech-head-select").value);
  state.speechMatrix = map;
  const canvas = $("speech-attention");
  const rows = map.length;
  canvas.height = SPEECH.spectrogram + SPEECH.gap + rows * SPEECH.row + SPEECH.axis;
  const context = canvas.getContext("2d");
  const {x, top} = speechLayout(canvas);
  context.fillStyle = "white";
  context.fillRect(0, 0, canvas.width, canvas.height);

  // the spectrogram: feature frame f spans [f, f + 1) hops; band 0 (lowest) at the bottom
  const features = spec.features;
  const bands = features.length ? features[0].length : 0;
  const values = features.flat();
  const low = Math.min(...values), high = Math.max(...values);
  const bandHeight = SPEECH.spectrogram / Math.max(bands, 1);
  features.forEach((frame, f) => {
    const x0 = x(f * spec.feature_seconds), x1 = x((f + 1) * spec.feature_seconds);
    frame.forEach((v, m) => {
      context.fillStyle = magma((v - low) / Math.max(high - low, 1e-9));
      context.fillRect(x0, SPEECH.spectrogram - (m + 1) * bandHeight, x1 - x0 + 0.5, bandHeight + 0.5);
    });
  });

  // the attention: row i, encoder frame j spans [j, j + 1) * frame_seconds
  const vmax = Math.max(1e-9, ...map.flat());
  context.font = "13px system-ui, sans-serif";
  context.textAlign = "right";
  context.textBaseline = "middle";
  map.forEach((weights, i) => {
    const y = top + i * SPEECH.row;
    weights.forEach((w, j) => {
      const x0 = x(j * spec.frame_seconds), x1 = x((j + 1) * spec.frame_seconds);
      context.fillStyle = `rgba(29, 78, 216, ${(w / vmax).toFixed(3)})`;
      context.fillRect(x0, y, x1 - x0 + 0.5, SPEECH.row - 1);
    });
    context.fillStyle = i === highlightRow ? "#1d4ed8" : "#111827";
    context.fillText(label(attention.output_tokens[i]), SPEECH.left - 6, y + SPEECH.row / 2);
  });

  // the time axis
  const axisY = top + rows * SPEECH.row;
  context.fillStyle = "#6b7280";
  context.textAlign = "center";
  context.textBaseline = "top";
  const step = [0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10].find((s) => result.seconds / s <= 12) || 20;
  for (let t = 0; t <= result.seconds + 1e-9; t += step) {
    context.fillRect(x(t), axisY, 1, 4);
    context.fillText(`${Number(t.toFixed(2))} s`, x(t), axisY + 6);
  }
  if (highlightRow !== null) markSpeechRow(context, highlightRow);
  canvas.dataset.row = highlightRow === null ? "" : String(highlightRow);
  canvas.dataset.rows = String(rows);
  canvas.dataset.frames = String(attention.frames);
  canvas.dataset.drawn = "1";
}

function markSpeechRow(context, row) {
  // Outline row `row`, and shade the audio it attends to over the spectrogram (the largest weight darker).
  const canvas = $("speech-attention");
  const spec = state.transcription.attention.spectrogram;
  const {x, top} = speechLayout(canvas);
  const weights = state.speechMatrix[row];
  const best = weights.indexOf(Math.max(...weights));
  weights.forEach((w, j) => {
    if (w < HIGHLIGHT * weights[best]) return;
    const x0 = x(j * spec.frame_seconds), x1 = x((j + 1) * spec.frame_seconds);
    context.fillStyle = j === best ? "rgba(245, 158, 11, 0.55)" : "rgba(253, 230, 138, 0.45)";
    context.fillRect(x0, 0, x1 - x0, SPEECH.spectrogram);
  });
  context.strokeStyle = "#1d4ed8";
  context.lineWidth = 2;
  context.strokeRect(SPEECH.left, top + row * SPEECH.row, canvas.width - SPEECH.left - SPEECH.right, SPEECH.row - 1);
  return best;
}

function speechRowAt(canvas, event) {
  // The attention row under the mouse, or null over the spectrogram, the labels' margin or the axis.
  const box = canvas.getBoundingClientRect();
  const y = (event.clientY - box.top) * canvas.height / box.height;
  const row = Math.floor((y - SPEECH.spectrogram - SPEECH.gap) / SPEECH.row);
  return row >= 0 && row < (state.speechMatrix || []).length ? row : null;
}

function speechHighlight(row, redraw = false) {
  // Redraw with output token `row` marked (null clears), and say where it listened most.
  const canvas = $("speech-attention");
  if (!state.transcription || (!redraw && canvas.dataset.row === (row === null ? "" : String(row)))) return;
  drawSpeech(row);
  $("speech-tokens").querySelectorAll(".out-token").forEach((el) => {
    el.classList.toggle("active", Number(el.dataset.index) === row);
  });
  if (row === null) {
    delete canvas.dataset.best;
    $("speech-hover").textContent = "";
    return;
  }
  const weights = state.speechMatrix[row];
  const best = weights.indexOf(Math.max(...weights));
  const seconds = state.transcription.attention.spectrogram.frame_seconds;
  canvas.dataset.best = String(best);
  $("speech-hover").textContent = `${label(state.transcription.attention.output_tokens[row])} attends most to ` +
    `${(best * seconds).toFixed(2)}–${((best + 1) * seconds).toFixed(2)} s (${weights[best].toFixed(3)})`;
}

init();
