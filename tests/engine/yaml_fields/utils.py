"""!function helpers for the YAML-field parity tasks (loaded by Assay and by lm-eval)."""


def process_docs(dataset):
    def add_fields(doc):
        return {**doc, "stem": doc["question"]["stem"].strip(), "labels": [c["label"] for c in doc["question"]["choices"]]}

    return dataset.map(add_fields)


def doc_to_text(doc):
    return f"Q: {doc['stem']}\nA:"


def doc_to_choice(doc):
    return [c["text"] for c in doc["question"]["choices"]]


def doc_to_target(doc):
    return doc["labels"].index(doc["answerKey"])


def process_results(doc, results):
    lls = [ll for ll, _ in results]
    best = max(range(len(lls)), key=lambda i: lls[i])
    gold = doc["labels"].index(doc["answerKey"])
    return {"custom_acc": float(best == gold), "margin": lls[gold] - max(lls)}


def fixed_shots():
    return [
        {"question": {"stem": "Which is a planet?", "choices": [{"text": "Mars", "label": "A"}, {"text": "Moon", "label": "B"}]},
         "answerKey": "A", "stem": "Which is a planet?", "labels": ["A", "B"]},
        {"question": {"stem": "Water freezes at?", "choices": [{"text": "0 C", "label": "A"}, {"text": "50 C", "label": "B"}]},
         "answerKey": "A", "stem": "Water freezes at?", "labels": ["A", "B"]},
    ]
