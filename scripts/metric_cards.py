"""Write the metric cards docs/metrics/NAME.md from the registry and the narrative below.

The facts that the registry knows (inputs, model, direction, range, level, corpus statistics,
options with types and defaults, the default suite) are generated, so a card cannot drift
from the code; the narrative (what the metric measures, how to read it, values from the
source papers, limitations) is written here by hand. A metric registered elsewhere (e.g.
``union`` by the learned-metrics code) may have a hand-written card instead: keep the
section headings and the "Range and direction" table rows that tests/metrics check.

Run: python scripts/metric_cards.py            (write every card known here)
     python scripts/metric_cards.py --check    (exit 1 if a card is missing or stale)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "metrics"

# --------------------------------------------------------------------------- shared text

BLEU_LIMITS = (
    "BLEU rewards exact n-gram overlap with one human continuation, while an open-ended prompt "
    "has countless good continuations: a creative story that shares few words with the "
    "reference scores near zero. Sentence BLEU is noisy for single items; compare systems "
    "with corpus BLEU and its bootstrap interval. Scores depend on the tokenizer (recorded "
    "in the signature)."
)
ROUGE_LIMITS = (
    "Surface overlap with one reference; insensitive to meaning-preserving paraphrase and, for "
    "ROUGE-1/2, to order. Clark (2021, Table 5.1) shows ROUGE-L dropping 20% when clauses of "
    "a good summary are merely reordered. Values are on a 0-1 scale (the thesis multiplies by "
    "100)."
)
BERTSCORE_LIMITS = (
    "Raw values crowd into a narrow band that depends on the model and layer (cosines of "
    "contextual embeddings are rarely near 0), so compare numbers only under the same "
    "signature; rescaling spreads them but needs a baseline. The offline MiniLM is a sentence "
    "embedding model, not the roberta-large the BERTScore authors recommend for English; its "
    "default layer (4 of 6) was chosen by analogy with bert-score's table, not tuned. Texts "
    "longer than 512 tokens are encoded in overlapping windows (a warning says so)."
)
BASELINE_NOTE = (
    "Rescaling (`rescale=true`) needs a baseline `b` (the mean score of unrelated pairs): "
    "bert-score ships baseline files for hub models (used automatically when the package is "
    "installed); for the offline MiniLM storyeval ships one computed by "
    "`scripts/bertscore_baseline.py` from 20,000 random pairs of sentences of different "
    "stories in `examples/human.jsonl` (a small single-domain sample, not bert-score's 1M "
    "Common Crawl pairs: rescaled values are comparable only with other storyeval runs); any "
    "other baseline can be given as a file (`LAYER,P,R,F` rows) or as three numbers `P,R,F`."
)
MOVER_LIMITS = (
    "Needs a reference; bag-of-embeddings metrics ignore word order within a sentence (SMS and "
    "S+WMS see it only through sentence boundaries); the offline GloVe is 6B-token 50-d, "
    "smaller than the 300-d Common Crawl vectors of the thesis, so absolute values differ "
    "from the thesis'. Words without a vector are dropped silently by design (as in the "
    "original code), which can make very short or unusual texts undefined (NaN). Similarity "
    "is `exp(-distance)`, so values are small and compress at the top; only their order is "
    "meaningful."
)
DISTINCT_LIMITS = (
    "Distinct-n of one story depends strongly on its length (longer texts repeat more "
    "function words): compare systems whose stories have similar lengths. It measures lexical "
    "variety, not quality; random word salad scores 1.0."
)
CONCRETE_LIMITS = (
    "Depends on the POS tagger (the offline spaCy small English model) and on the rating "
    "list's coverage (words without a rating are ignored); a descriptive measure of style, "
    "neither higher nor lower is better."
)
EDIT_LIMITS = (
    "Exact-match measures: a writer's paraphrase of a suggestion counts as a complete "
    "rewrite. They need both texts of each pair in the record (`original` option names the "
    "field with the unedited text)."
)

CLARK = "Clark (2021), *Text Generation and Evaluation for Human-Machine Collaborative Writing*"
CF = "Callan & Foster (2023), *Expert Systems* 40(6) e13292"

# --------------------------------------------------------------------------- per metric

NARRATIVE: dict[str, dict[str, str]] = {
    "bleu": {
        "measures": "Modified n-gram precision (n = 1..4) of the story against its reference(s) "
        "with a brevity penalty (Papineni et al. 2002), computed by sacrebleu with its "
        "defaults (13a tokenizer, exp smoothing, effective order for sentences). The "
        "per-system table adds corpus BLEU (`corpus_bleu`), computed from the summed "
        "per-story n-gram statistics exactly as `sacrebleu.corpus_bleu` does.",
        "read": "0-100. Near 0 for open-ended continuations is normal; differences of a point "
        "or two between story generators are rarely meaningful. Prefer `corpus_bleu` with its "
        "bootstrap interval to the mean of sentence BLEU.",
        "papers": "The source documents report no BLEU-4 for stories. Example corpus "
        "(SmolLM2-135M continuations vs the human continuation, `make demo`): see the "
        "per-system table; values around 1-2 are expected.",
        "limits": BLEU_LIMITS,
        "refs": "Papineni et al. (2002); Post (2018), sacrebleu.",
    },
    "bleu1": {
        "measures": "Unigram BLEU: clipped unigram precision with the brevity penalty, the "
        '"1-gram BLEU" Callan & Foster report beside BERTScore. Corpus value `corpus_bleu1` '
        "in the per-system table.",
        "read": "0-100 (Callan & Foster write 0-1: their 0.1226 is 12.26 here). It measures "
        "shared words, not coherence: their example prompt/sentence pair has a low BLEU-1 but a "
        "high rescaled BERTScore.",
        "papers": f'{CF}: the prompt "You are born with the ability to stop time..." and the '
        'story sentence "Your brain takes over and tells you to move, but you cannot." have '
        "1-gram BLEU 0.1226 (12.26 on this scale) and rescaled BERTScore 0.287.",
        "limits": BLEU_LIMITS,
        "refs": f"{CF}; Papineni et al. (2002).",
    },
    "rouge1": {
        "measures": "ROUGE-1 F-measure: unigram overlap between story and reference "
        "(rouge-score package; with several references the best one counts).",
        "read": "0-1, higher means more shared words with the reference.",
        "papers": f"{CLARK}, Table 5.4 (CNN/Daily Mail summaries, x100): re-trained MLE+Pgen "
        "baseline ROUGE-1 36.95; with an SMS reward 38.52.",
        "limits": ROUGE_LIMITS,
        "refs": "Lin (2004); Google's rouge-score.",
    },
    "rouge2": {
        "measures": "ROUGE-2 F-measure: bigram overlap between story and reference "
        "(rouge-score; best reference).",
        "read": "0-1; for open-ended stories values are near 0.",
        "papers": f"{CLARK}, Table 5.4 (summaries, x100): MLE+Pgen baseline ROUGE-2 15.56; "
        "with WMS or SMS rewards 16.52.",
        "limits": ROUGE_LIMITS,
        "refs": "Lin (2004).",
    },
    "rougeL": {
        "measures": "ROUGE-L F-measure: longest common subsequence of story and reference "
        "(rouge-score; best reference).",
        "read": "0-1; sensitive to the order of shared words.",
        "papers": f"{CLARK}: Table 5.1, a human summary scores ROUGE-L 39.30 (x100) and 31.44 "
        "once its clauses are reordered; Table 5.3, Spearman correlation with human judgments "
        "0.117 (summaries) and 0.441 (essays), below the sentence mover's metrics.",
        "limits": ROUGE_LIMITS,
        "refs": "Lin (2004); Clark et al. (2019).",
    },
    "bertscore_p": {
        "measures": "BERTScore precision: for each token of the story, the cosine similarity "
        "of its contextual embedding to the most similar reference token, averaged "
        "(optionally idf-weighted). With several references, the best value counts.",
        "read": "How much of the story is supported by the reference's meaning. Raw values "
        "live in a narrow band (about 0.4-0.7 for the offline encoder at layer 4); use "
        "`rescale=true` for a spread-out scale.",
        "papers": "The source documents report BERTScore only in its unreferenced coherence "
        "use (see bertscore_prompt); with the same model and layer, storyeval reproduces the "
        "bert-score package to 1e-4 (tests/metrics/test_metrics_embedding.py).",
        "limits": BERTSCORE_LIMITS,
        "refs": "Zhang et al. (2020), BERTScore (ICLR).",
    },
    "bertscore_r": {
        "measures": "BERTScore recall: for each reference token, its best cosine match in the "
        "story, averaged (optionally idf-weighted); best reference.",
        "read": "How much of the reference's content the story covers. Same scale caveats as "
        "bertscore_p.",
        "papers": "No values for stories in the source documents (see bertscore_p).",
        "limits": BERTSCORE_LIMITS,
        "refs": "Zhang et al. (2020).",
    },
    "bertscore_f": {
        "measures": "BERTScore F1: harmonic mean of BERTScore precision and recall (greedy "
        "cosine matching of contextual token embeddings); each of P, R, F is maximised over "
        "several references, as in the bert-score package.",
        "read": "The usual headline BERTScore. Compare only under one signature (model, layer, "
        "idf, rescaling).",
        "papers": "No values for stories in the source documents (see bertscore_prompt for "
        "Callan & Foster's unreferenced use). Parity: equal to `bert_score.score(..., "
        "model_type=PATH, num_layers=4)` within 1e-4.",
        "limits": BERTSCORE_LIMITS,
        "refs": "Zhang et al. (2020); Zhang et al. (2020b), rescaling with baselines.",
    },
    "moverscore": {
        "measures": "MoverScore (Zhao et al. 2019) as in the authors' maintained "
        "`moverscore_v2`: last-layer contextual token embeddings (L2-normalised), word-piece "
        "continuations and punctuation removed, tokens weighted by idf (computed over the "
        "run's references for the reference side and over its stories for the story side), "
        "Euclidean transport cost, score `1 / (1 + EMD)`; best reference.",
        "read": "0-1, higher = the story's meaning can be moved onto the reference's more "
        "cheaply. Values cluster (about 0.45 on the example corpus); only differences under "
        "one signature matter. With idf, a corpus of one story is undefined (every token "
        "weighs 0): a warning says so; set `idf=false`.",
        "papers": "The source documents cite MoverScore (Callan & Foster 2023; Clark 2021) but "
        "report no values. The original paper used BERT fine-tuned on MNLI with power means of "
        "layers; storyeval follows the v2 recipe with any encoder (default: the offline "
        "MiniLM), so values are not comparable to the paper's.",
        "limits": "Depends on the corpus (idf) as well as the pair: the same story scores "
        "differently in a different run; keep the corpus fixed when comparing systems. Needs "
        "a reference.",
        "refs": "Zhao et al. (2019), MoverScore (EMNLP); POT (Flamary et al. 2021).",
    },
    "wms": {
        "measures": "Word mover's similarity (Clark 2021, Eqs. 5.1-5.3): each document is a "
        "bag of word embeddings weighted by relative frequency `count(i)/|A|`; the distance is "
        "the earth mover's distance with Euclidean cost (solved exactly with POT), the "
        "similarity `exp(-distance)`. Stopwords (spaCy's list) and punctuation are removed "
        "first, as in Kusner et al. (2015) and appendix B.1.",
        "read": "0-1, 1 for identical bags of words. Word order does not matter.",
        "papers": f"{CLARK}: Table 5.1 (x1000) human summary 57.85, repeated clauses 57.31; "
        "Table 5.3, Spearman with human judgments 0.180 (summaries) and 0.429 (essays) with "
        "GloVe; Table 5.4 (on the same x1000 scale, judging by the values) 13.02 for the MLE baseline, 14.52 with a WMS reward.",
        "limits": MOVER_LIMITS,
        "refs": "Kusner et al. (2015); Clark, Celikyilmaz & Smith (2019).",
    },
    "sms": {
        "measures": "Sentence mover's similarity (Clark 2021, Eq. 5.4): each document is a bag "
        "of sentence embeddings (the mean of each sentence's word embeddings) weighted by "
        "sentence length `|i|/|A|`; EMD with Euclidean cost; `exp(-distance)`.",
        "read": "0-1; rewards stories whose sentences, as units, resemble the reference's. "
        "Repeated clauses lower it (Table 5.1) while reordering words within sentences does "
        "not.",
        "papers": f"{CLARK}: Table 5.1 (x1000) human summary 99.98, repetition 89.40 (-11%); "
        "Table 5.3, Spearman 0.258 (summaries, best of all metrics) and 0.457 (essays) with "
        "GloVe; Table 5.4 (same scale) 90.05 for the MLE baseline, 96.65 with an SMS reward.",
        "limits": MOVER_LIMITS,
        "refs": "Clark, Celikyilmaz & Smith (2019).",
    },
    "swms": {
        "measures": "Sentence and word mover's similarity (Clark 2021, Eq. 5.5): one bag of "
        "both word and sentence embeddings, words weighted `count(i)/2|A|` and sentences "
        "`|i|/2|A|`, so that words may move to sentences and back; EMD with Euclidean cost; "
        "`exp(-distance)`.",
        "read": "0-1; combines lexical (WMS) and sentence-level (SMS) similarity.",
        "papers": f"{CLARK}: Table 5.1 (x1000) human summary 24.06, repetition 22.81; "
        "Table 5.3, Spearman 0.214 (summaries) and 0.488 (essays, best; significantly above "
        "ROUGE-L) with GloVe; Table 5.4 (same scale) 32.15 for the MLE baseline.",
        "limits": MOVER_LIMITS,
        "refs": "Clark, Celikyilmaz & Smith (2019).",
    },
    "perplexity": {
        "measures": "Perplexity of the story under a causal language model: `exp` of the mean "
        "negative log-likelihood of its tokens, scored as a continuation of its prompt by "
        "default (`context=prompt`; the prompt's tokens are context only) after the model's "
        "start token. Per system: `corpus_perplexity` (pooling every token of the system) and "
        "`mean_item_perplexity` (the mean of story perplexities); they differ and papers use "
        "both. Texts longer than the model's context are scored with a sliding window "
        "(`window`, `stride`), never truncated.",
        "read": "Lower = more predictable to the LM. It measures fluency/typicality under one "
        "model, not quality: repetitive, bland text has low perplexity, and sampling with a "
        "low temperature lowers it. Compare only under one model and tokenizer (in the "
        "signature).",
        "papers": "The source documents report no perplexity of stories. For orientation, "
        "the offline SmolLM2-135M gives about 7 on a fluent sentence and above 2,000 on the "
        "same words shuffled.",
        "limits": "The offline model is a small 4-bit-quantised instruction model "
        "(dequantised to float32): its perplexities are higher and noisier than a large LM's. "
        "Scoring a system's own generations with the model that generated them favours that "
        "system.",
        "refs": "Jelinek et al. (1977); Hugging Face, Perplexity of fixed-length models.",
    },
    "bertscore_prompt": {
        "measures": "BERTScore-1 (Callan & Foster 2023): BERTScore F1 between the prompt and "
        "each sentence of the story (each encoded alone), averaged over the sentences. An "
        "unreferenced measure of how much the story stays related to its prompt.",
        "read": "Higher = sentences semantically closer to the prompt. Callan & Foster used "
        "rescaled scores (`--option bertscore.rescale=true`).",
        "papers": f"{CF}, Table 2: Pearson-style correlation of BERTScore-1 with story/prompt "
        "relatedness (Q1) 0.41, coherence (Q2) 0.25, story interest (Q4) 0.28; with "
        "BERTScore-2 0.66. Rescaled values ranged from -0.187 to 0.365 (mean 0.074) on 100 "
        "GPT-Neo stories. Their highest BERTScore-1 went to a highly repetitive story.",
        "limits": BERTSCORE_LIMITS + " Rewards repeating the prompt's words.",
        "refs": f"{CF}; Zhang et al. (2020).",
    },
    "bertscore_prev": {
        "measures": "BERTScore-2 (Callan & Foster 2023): BERTScore F1 of the first sentence "
        "against the prompt and of each later sentence against the one before it, averaged.",
        "read": "Higher = consecutive sentences semantically closer (local cohesion).",
        "papers": f"{CF}, Table 2: correlation with Q1 0.29, Q2 0.21, Q4 0.23. Rescaled values "
        "ranged from -0.168 to 0.439 (mean 0.138), slightly above BERTScore-1.",
        "limits": BERTSCORE_LIMITS + " Rewards repetition between adjacent sentences.",
        "refs": f"{CF}; Zhang et al. (2020).",
    },
    "nsp_prompt": {
        "measures": "BERT-NSP-1 (Callan & Foster 2023): the probability, under a BERT model "
        "with a trained next-sentence-prediction head, that each story sentence follows the "
        "prompt, averaged (`score=label` averages the 0/1 predictions instead).",
        "read": "0-1; higher = sentences judged continuations of the prompt.",
        "papers": f"{CF}: 433 of 531 prompt/sentence pairs predicted to follow; correlation "
        "with Q1 0.25, Q2 0.12, Q4 0.10. The authors conclude NSP, used this way, is not a "
        "useful measure of narrative coherence.",
        "limits": "Needs a model with a trained NSP head: the offline MiniLM has none, so the "
        "metric refuses (exit 2) and names `bert-base-uncased` (hub; needs network access or "
        "a local copy) and `storyeval train nsp --stories HUMAN.jsonl -o DIR`, which trains a "
        "siamese head (cosine of mean-pooled sentence embeddings) on the offline encoder. "
        "BERT's own head saturates near 1 for fluent text; a head trained on your corpus "
        "measures continuity as that corpus shows it, and scores its own training stories "
        "higher than unseen ones.",
        "refs": f"{CF}; Devlin et al. (2019).",
    },
    "nsp_prev": {
        "measures": "BERT-NSP-2 (Callan & Foster 2023): the probability that the first "
        "sentence follows the prompt and each later sentence the one before it, averaged.",
        "read": "0-1; higher = each sentence judged a continuation of the previous one.",
        "papers": f"{CF}: 497 of 531 pairs predicted to follow; correlation with Q1 0.25, Q2 "
        "0.15, Q4 0.25; with BERT-NSP-1 0.61.",
        "limits": "As nsp_prompt: needs a trained NSP head (`--option nsp.model=...`); "
        "saturates for fluent text.",
        "refs": f"{CF}; Devlin et al. (2019).",
    },
    "embedding_coherence": {
        "measures": "Mean cosine similarity of consecutive sentence embeddings of the story "
        "(each sentence encoded alone; mean-pooled last-layer token embeddings, the "
        "sentence-transformers recipe for all-MiniLM-L6-v2, which it reproduces).",
        "read": "-1..1; higher = adjacent sentences about the same thing. Undefined for a "
        "one-sentence story.",
        "papers": "Not in the source documents; a common embedding-based cohesion proxy "
        "(cf. the Q2 coherence question of Callan & Foster). Example corpus values: see the "
        "per-system table of `make demo`.",
        "limits": "Topical similarity is not narrative coherence: repetition scores high and "
        "a well-motivated scene change scores low.",
        "refs": "Reimers & Gurevych (2019), Sentence-BERT.",
    },
    "distinct1": {
        "measures": "distinct-1 (Li et al. 2016): unique unigrams over all unigrams of the "
        "story (lower-cased words; punctuation excluded unless `punctuation=true`), as in "
        "Clark (2021) Table 4.3 following See et al. (2019).",
        "read": "0-1; higher = more varied vocabulary, lower = more repetition.",
        "papers": f"{CLARK}, Table 4.3: FUSION 0.75, GPT2 (top-k) 0.53, human 0.72; Table 4.6: "
        "nucleus 0.77, top-k 0.60, human 0.72.",
        "limits": DISTINCT_LIMITS,
        "refs": "Li et al. (2016); See et al. (2019).",
    },
    "distinct2": {
        "measures": "distinct-2: unique bigrams over all bigrams of the story.",
        "read": "0-1; higher = less repetition of word pairs.",
        "papers": f"{CLARK}, Table 4.3: FUSION 0.97, GPT2 0.70, human 0.95; Table 4.6: nucleus "
        "0.96, top-k 0.78, human 0.96.",
        "limits": DISTINCT_LIMITS,
        "refs": "Li et al. (2016); See et al. (2019).",
    },
    "distinct3": {
        "measures": "distinct-3: unique trigrams over all trigrams of the story.",
        "read": "0-1; values below about 0.9 signal looping text.",
        "papers": f"{CLARK}, Table 4.3: FUSION 1.00, GPT2 0.76, human 0.99; Table 4.6: nucleus "
        "0.99, top-k 0.84, human 0.99.",
        "limits": DISTINCT_LIMITS,
        "refs": "Li et al. (2016); See et al. (2019).",
    },
    "repeated_ngram_rate": {
        "measures": "The share of the story's n-grams (n = 4 by default) that repeat an earlier "
        "n-gram of the same story: seq-rep-n of Welleck et al. (2020), equal to "
        "`1 - distinct-n` of the story.",
        "read": "0-1; 0 = no repeated 4-gram. Degenerate sampling (low temperature, small "
        "top-k) raises it.",
        "papers": f"The source documents report repetition through distinct-n ({CLARK}, Tables "
        "4.3 and 4.6: GPT2 with top-k is the most repetitive); no seq-rep values.",
        "limits": DISTINCT_LIMITS,
        "refs": "Welleck et al. (2020), unlikelihood training.",
    },
    "repeated_sentence_rate": {
        "measures": "The share of the story's sentences that repeat an earlier sentence of the "
        "story (compared as lower-cased words without punctuation).",
        "read": "0-1; anything above 0 is verbatim looping, typical of degenerate decoding.",
        "papers": "Not reported in the source documents; Callan & Foster (2023) note that their "
        "highest BERTScore-1 went to a repetitive story, which this metric flags.",
        "limits": "Only verbatim repeats count; near-duplicates do not. Depends on the sentence "
        "splitter.",
        "refs": "Holtzman et al. (2020) on degenerate repetition.",
    },
    "sentence_length": {
        "measures": "Mean number of words per sentence of the story (pysbd sentences; word "
        "tokens without punctuation), a proxy for syntactic complexity.",
        "read": "Descriptive: compare with human-written text of the same genre (machines "
        "tend to write shorter sentences).",
        "papers": f"{CLARK}, Table 4.3: FUSION 13.70, GPT2 10.31, human 18.86; Table 4.6: "
        "nucleus 12.76, top-k 10.53, human 19.28.",
        "limits": "Depends on the sentence splitter and on dialogue punctuation.",
        "refs": "Roemmele et al. (2017); See et al. (2019).",
    },
    "concreteness_noun": {
        "measures": "Mean concreteness rating (Brysbaert et al. 2014; 1 = abstract .. 5 = "
        "concrete) of the story's nouns, found with spaCy's POS tags and looked up by lemma.",
        "read": "Descriptive: machine text tends to be more concrete than human text.",
        "papers": f"{CLARK}, Table 4.3: FUSION 4.04, GPT2 4.35, human 4.17; Table 4.6: nucleus "
        "4.15, top-k 4.34, human 4.23.",
        "limits": CONCRETE_LIMITS,
        "refs": "Brysbaert, Warriner & Kuperman (2014); See et al. (2019).",
    },
    "concreteness_verb": {
        "measures": "Mean concreteness rating (Brysbaert et al. 2014) of the story's verbs "
        "(spaCy POS tags, lemmas).",
        "read": "Descriptive; verbs are rated lower than nouns on average.",
        "papers": f"{CLARK}, Table 4.3: FUSION 2.90, GPT2 3.10, human 3.12; Table 4.6: nucleus "
        "3.08, top-k 3.08, human 3.11.",
        "limits": CONCRETE_LIMITS,
        "refs": "Brysbaert, Warriner & Kuperman (2014); See et al. (2019).",
    },
    "self_bleu": {
        "measures": "Self-BLEU (Zhu et al. 2018): each story's BLEU (sacrebleu, n = 4) against "
        "all the other stories of the same system as references; the system's value is the "
        "mean. A per-system measure: per-story values exist but depend on the system's other "
        "stories.",
        "read": "0-100; lower = the system's stories differ more from each other (more "
        "diverse). Undefined for a story alone in its system.",
        "papers": f"Cited as a diversity measure in {CLARK} (ch. 1); no values reported.",
        "limits": "Grows with the number of stories (more references, more matches): compare "
        "systems on the same number of stories. Uses sacrebleu's exp smoothing, unlike Texygen's "
        "NLTK smoothing, so values differ from papers that used Texygen.",
        "refs": "Zhu et al. (2018), Texygen.",
    },
    "levenshtein": {
        "measures": "Levenshtein edit distance (character insertions, deletions, "
        "substitutions) from the original text (field named by `original`) to the story, "
        "optionally divided by the longer length.",
        "read": "Lower = the writer kept more of the suggestion. Library function: "
        "`storyeval.metrics.edits.levenshtein(a, b)`.",
        "papers": f"{CLARK}, Table 4.2 (ED): FUSION 37.61, GPT2 29.49; Table 4.5: nucleus 34.65, "
        "top-k 36.69 (the thesis does not state its normalisation).",
        "limits": EDIT_LIMITS + " Raw distances grow with text length; use `normalize=true` "
        "to compare texts of different lengths.",
        "refs": "Levenshtein (1966).",
    },
    "jaccard": {
        "measures": "Jaccard similarity of the sets of lower-cased word tokens of the story "
        "and the original text.",
        "read": "0-1; higher = more of the vocabulary shared. Library function: "
        "`storyeval.metrics.edits.jaccard(a, b)`.",
        "papers": f"{CLARK}, Table 4.2 (JS, x100): FUSION 51.13, GPT2 61.35; Table 4.5: "
        "nucleus 53.64, top-k 50.96.",
        "limits": EDIT_LIMITS + " Ignores order and counts.",
        "refs": "Jaccard (1912).",
    },
    "user": {
        "measures": "User Story Edit Ratings (Akoury et al. 2020): the longest common "
        "substring of the original and edited token sequences, then recursively the longest "
        "common substrings to its left and right (Ratcliff/Obershelp); precision = matched / "
        "original tokens, recall = matched / edited tokens, F1 (default; `component`).",
        "read": "0-1; higher = more of the suggestion survives in place. Library function: "
        "`storyeval.metrics.edits.user(edited, original)` returns precision, recall and F1.",
        "papers": f"{CLARK}, Table 4.2 (USER, x100): FUSION 60.69, GPT2 71.77; Table 4.5: "
        "nucleus 63.64, top-k 62.18.",
        "limits": EDIT_LIMITS + " Moved blocks count only once (the longest run wins).",
        "refs": "Akoury et al. (2020), STORIUM (EMNLP); Ratcliff & Metzener (1988).",
    },
    "mauve": {
        "measures": "MAUVE (Pillutla et al. 2021): how close the distribution of a system's "
        "stories is to the distribution of people's stories (`reference_system`, default "
        "`human`). Each story becomes a feature vector (default: the offline encoder's "
        "mean-pooled last layer; `features=causal-lm`: the causal LM's last-token state, as "
        "the authors do with GPT-2 large); both sets are L2-normalised, reduced by PCA (90% "
        "of the variance) and quantised together by k-means into n/10 clusters; MAUVE is the "
        "area under the divergence curve of the two cluster histograms. k-means depends on "
        "its seed, so storyeval runs `seeds` quantisations and reports their mean with a "
        "Student t interval across seeds. Implemented in storyeval (MIT) and tested equal to "
        "the authors' `mauve-text` on the same features and seed.",
        "read": "0-1, higher = closer to people's stories (1: indistinguishable in feature "
        "space). A corpus-level metric: one value per system, no value per story (`storyeval "
        "score` writes no per-story record for it; the per-system table has it). `storyeval "
        "mauve STORIES -o DIR` writes the table, every seed's divergence curve and a plot; "
        "`storyeval report --mauve DIR` adds them to a report.",
        "papers": "Pillutla et al. (2021) compute MAUVE on web text with GPT-2 large features "
        "and 5,000 texts a side, where nucleus sampling scores far above greedy decoding and "
        "larger models above smaller ones. Values depend on the feature model, so they are "
        "not comparable with the offline encoder's.",
        "limits": "Needs many texts: below 100 a side (a warning says so) the histogram has "
        "fewer than 10 clusters and the value moves with the seed (see the interval); the "
        "authors use 5,000. When the two sides' lengths differ strongly (median ratio above "
        "1.5, warned), MAUVE mostly measures length: truncate both to similar lengths. "
        "Values are comparable only under the same features, model, buckets and seeds (all in "
        "the signature). On short texts the features carry little signal (mauve issue #9).",
        "refs": "Pillutla et al. (2021), MAUVE (NeurIPS); Pillutla et al. (2023), MAUVE "
        "scores for generative models (JMLR); Liu et al. (2021), divergence frontiers.",
    },
    "mauve_star": {
        "measures": "MAUVE* (Pillutla et al. 2023): MAUVE computed from cluster histograms "
        "with Krichevsky-Trofimov smoothing (half a count added to every cluster), which "
        "lowers its bias on small samples. Same features, quantisation and seeds as `mauve` "
        "(the two share one computation).",
        "read": "0-1, higher = closer to people's stories; usually a little above MAUVE on "
        "small samples. One value per system (corpus level).",
        "papers": "Pillutla et al. (2023) recommend the smoothed estimate for small samples; "
        "no story-generation values are reported.",
        "limits": "As for `mauve`: many texts needed, lengths matter, comparable only under the "
        "same signature.",
        "refs": "Pillutla et al. (2023), MAUVE scores for generative models (JMLR).",
    },
    "overused_phrase_rate": {
        "measures": "The share of a story's word n-grams (trigrams by default) that are "
        "over-used phrases of its system: n-grams found in at least `min_stories` of the "
        "system's stories and, as a share of stories, at least `min_ratio` times as often as "
        "in the reference (human) stories of the same corpus (each share smoothed by half a "
        "story). `storyeval diagnose` lists the phrases with their ratios.",
        "read": "0-1, lower = closer to the human phrase profile. Undefined (NaN) for the "
        "reference system's own stories. Level `system`: a story's value depends on the other "
        "stories of its system and on the reference stories.",
        "papers": "Over-used phrases of model prose are reported in creative-writing "
        "benchmarks (e.g. EQ-Bench Creative Writing's slop and repetition scores); no "
        "published values for this exact definition.",
        "limits": "Depends on corpus size: with few stories, few phrases reach `min_stories`. "
        "A prompt-driven phrase (the prompt's own words) can be over-used by every system; "
        "compare systems on the same prompts. Words only: punctuation and case are ignored.",
        "refs": "Paech (2023), EQ-Bench; Li et al. (2016) for distinct n-grams.",
    },
    "cross_story_repetition": {
        "measures": "The share of a story's word 4-grams (by default) that also occur in at "
        "least `min_stories` - 1 other stories of the same system: phrases a system reuses "
        "across stories (stock openings, refrains), which per-story repetition misses.",
        "read": "0-1, lower = each story's wording is its own. Level `system`.",
        "papers": "Repetition across samples is reported beside self-BLEU in studies of "
        "open-ended generation; no published values for this exact definition.",
        "limits": "Grows with the number of stories per system: compare systems with the same "
        "number of stories. Formulaic genres (fairy tales: 'once upon a time') repeat by "
        "design; compare with the human stories' value.",
        "refs": "Zhu et al. (2018), Texygen (Self-BLEU, the related corpus-level measure).",
    },
    "slop_index": {
        "measures": "The share of a story's words (lower-cased, punctuation dropped) on a list "
        "of words that instruction-tuned language models over-use in fiction ('tapestry', "
        "'testament', 'palpable', 'shimmering', ...). The list ships with storyeval "
        "(`slop-v1`, 133 word forms, written for the project) and is versioned in the "
        "signature; `slop_index.words=FILE` replaces it (then the file's name and hash are in "
        "the signature).",
        "read": "0-1 (in practice below 0.02), lower = fewer stock model words. Compare with "
        "the human stories of the same corpus.",
        "papers": "EQ-Bench Creative Writing (Paech) reports a 'slop' score from an "
        "over-used-word list; values are not comparable across lists.",
        "limits": "A fixed list misses new tics and flags legitimate uses ('whispered' in "
        "dialogue); a list is a convention, not a measurement of quality. Change the list "
        "only with a new version name.",
        "refs": "Paech (2023), EQ-Bench.",
    },
    "sentence_length_cv": {
        "measures": "The coefficient of variation (sd / mean, sd with n - 1) of the lengths in "
        "words of the story's sentences (pysbd, or spaCy with `split=spacy`): the variety of "
        "its rhythm ('burstiness').",
        "read": "Descriptive, 0 and up; people's stories usually vary sentence length more "
        "than a model's. Undefined with fewer than two sentences.",
        "papers": "Sentence-length variability is a standard stylometric measure; no values "
        "for the corpora of the seed documents.",
        "limits": "Depends on the sentence splitter (in the signature) and on dialogue "
        "formatting; very short stories give unstable values.",
        "refs": "Biber (1988), Variation across speech and writing.",
    },
    "paragraph_length_cv": {
        "measures": "The coefficient of variation (sd / mean) of the lengths in words of the "
        "story's paragraphs (blocks separated by blank lines, else by line breaks).",
        "read": "Descriptive, 0 and up. Undefined (NaN) for stories of one paragraph, so it "
        "is not in the default suite; ask for it on long stories.",
        "papers": "No published values for story generation.",
        "limits": "Meaningful only when the texts keep their paragraph breaks (many data sets "
        "flatten them).",
        "refs": "Biber (1988), Variation across speech and writing.",
    },
}

EXTRA_NOTES = {
    "bertscore_p": BASELINE_NOTE,
    "bertscore_r": BASELINE_NOTE,
    "bertscore_f": BASELINE_NOTE,
    "bertscore_prompt": BASELINE_NOTE,
    "bertscore_prev": BASELINE_NOTE,
}


def _inputs_text(spec) -> str:  # type: ignore[no-untyped-def]
    parts = ["`story`"]
    if spec.needs_prompt:
        parts.append("`prompt` (non-empty)")
    if spec.needs_reference:
        parts.append("`reference` (a string or a list: the best reference counts)")
    for key in spec.field_options:
        parts.append(f"the field named by `{spec.name}.{key}`")
    if spec.level == "system":
        parts.append("`system` (stories are compared with the other stories of their system)")
    if spec.level == "corpus":
        parts.append("`system` (each system is compared with the reference system)")
    model = {
        "encoder": "an encoder (default: the offline all-MiniLM-L6-v2; `model` option)",
        "causal-lm": "a causal LM (default: the offline SmolLM2-135M; `model` option)",
        "glove": "word vectors (default: the offline GloVe 6B 50d; `glove` option) or an encoder",
        "spacy": "a spaCy pipeline (default: the offline en_core_web_sm) and the Brysbaert ratings",
        "nsp": "a trained NSP head (`nsp.model`: a BERT with its NSP head, or a directory "
        "from `storyeval train nsp`; none ships offline)",
        "checkpoint": "a checkpoint directory (`model` option)",
    }.get(spec.model or "", "no model")
    return f"Fields: {', '.join(parts)}. Model: {model}."


def _per_system_text(spec, corpus: str) -> str:  # type: ignore[no-untyped-def]
    if spec.level == "corpus":
        against = ", ".join(f"`{s.name}`" for s in spec.system_statistics)
        return f"{against} of each system against `reference_system` (no per-story value)"
    return f"`{spec.item_statistic}` (with sd and bootstrap CI), corpus: {corpus}"


def render(spec) -> str:  # type: ignore[no-untyped-def]
    text = NARRATIVE[spec.name]
    corpus = ", ".join(f"`{c.name}`" for c in spec.corpus) or "none"
    ok, why = spec.runnable_offline()
    suite = "yes" if spec.default and ok else f"no ({why or 'ask for it by name'})"
    lines = [
        f"# {spec.name}",
        "",
        f"{spec.description}.",
        "",
        "## What it measures",
        "",
        text["measures"],
        "",
        "## Inputs",
        "",
        _inputs_text(spec),
        "",
        "## Range and direction",
        "",
        "| fact | value |",
        "|---|---|",
        f"| direction | {spec.direction} |",
        f"| range | {spec.range_text} |",
        f"| level | {spec.level} |",
        f"| per-system statistics | {_per_system_text(spec, corpus)} |",
        f"| families (for `--option FAMILY.KEY=...`) | {', '.join(f'`{f}`' for f in spec.families)} |",
        f"| default suite | {suite} |",
        "",
        "## Options",
        "",
        "| option | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for option in spec.options:
        kind = (
            " \\| ".join(str(c) for c in option.choices) if option.choices else option.type.__name__
        )
        default = (
            "required"
            if option.required
            else (
                "auto"
                if option.default is None
                else str(option.default).lower()
                if isinstance(option.default, bool)
                else str(option.default)
            )
        )
        lines.append(f"| `{spec.name}.{option.name}` | {kind} | {default} | {option.help} |")
    if not spec.options:
        lines.append("| (none) | | | |")
    lines += [
        "",
        "## How to read it",
        "",
        text["read"],
    ]
    if spec.name in EXTRA_NOTES:
        lines += ["", EXTRA_NOTES[spec.name]]
    lines += [
        "",
        "## Values from the source papers",
        "",
        text["papers"],
        "",
        "## Limitations",
        "",
        text["limits"],
        "",
        "## Example",
        "",
        "```bash",
        f"storyeval score examples/stories.jsonl --metrics {spec.name} --skip-missing -o out/{spec.name}.jsonl",
        "```",
        "",
        "## References",
        "",
        text["refs"],
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a card is missing or stale")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from storyeval.metrics import all_metrics

    DOCS.mkdir(parents=True, exist_ok=True)
    stale = []
    for spec in all_metrics():
        if spec.name not in NARRATIVE:
            if not (DOCS / f"{spec.name}.md").is_file():
                stale.append(f"{spec.name}: no narrative in scripts/metric_cards.py and no card")
            continue
        card = DOCS / f"{spec.name}.md"
        content = render(spec)
        if args.check:
            if not card.is_file() or card.read_text(encoding="utf-8") != content:
                stale.append(f"{card} is missing or stale: run python scripts/metric_cards.py")
        else:
            card.write_text(content, encoding="utf-8")
    if stale:
        print("\n".join(stale))
        raise SystemExit(1)
    if not args.check:
        print(f"wrote {len(NARRATIVE)} cards to {DOCS}")


if __name__ == "__main__":
    main()
