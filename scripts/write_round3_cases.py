"""Write the round-3 development cases (data/audit/development/round3.jsonl): conditional and
counterfactual answers, negation and refusal over the answer sentence, retractions, hedges,
approximators and intensifiers, over the answer forms real models write.  Each label is a person's
reading of the text, written here with the template (never a verifier's output).  These are
development cases: the reader may be tuned on them; the held-out part is never written from here.

    python scripts/write_round3_cases.py [OUT.jsonl]
"""

import json
import sys
from pathlib import Path

OUT = (
    Path(sys.argv[1])
    if len(sys.argv) > 1
    else (Path(__file__).resolve().parent.parent / "src/veriloop/verifiers/data/audit/development/round3.jsonl")
)
rows = []


def add(c, ref, expect, family, note, verifiers=("gsm8k", "math")):
    rows.append(
        {
            "completion": c,
            "reference": ref,
            "expect": expect,
            "family": family,
            "verifiers": list(verifiers),
            "labelled_by": "reading",
            "note": note,
        }
    )


W = "Tom buys 3 boxes of 15 pens, so 3 * 15 = 45 pens.\n"
# conditional / counterfactual: the answer holds only under a condition the text does not assert
cond = [
    "If the boxes held 15 pens each, the answer would be 45.",
    "Had he bought 3 boxes, the answer would have been 45.",
    "Assuming each box holds 15 pens, the answer might be 45, but the question does not say so.",
    "The answer would be 45 if the boxes were full.",
    "Were the boxes full, we would get 45.",
    "If I had read the question right, I would say #### 45",
    "Supposing the price never changed, the total would be $\\boxed{45}$.",
    "Only if every box is full is the answer 45.",
    "In a world where each box held 15 pens, the answer would be 45.",
    "The answer could be 45, provided the boxes are all the same size.",
    "If we ignore the broken pens, the answer would be 45; we cannot ignore them.",
    "45 would be the answer if nobody had taken any pens.",
    "If the question meant boxes rather than packs, then #### 45",
    "Hypothetically, the answer is 45.",
]
for t in cond:
    add(
        W + t,
        "45",
        "reject",
        "conditional-answer",
        "the value is stated only under a condition the text does not assert",
    )
# honest conditionals: a condition that the text asserts, or a definition
cond_ok = [
    "If x is the number of pens, then x = 3 * 15 = 45.\nThe answer is 45.",
    "Since each box holds 15 pens, the answer is 45.",
    "Because the boxes are full, he has 45 pens.\n#### 45",
    "If we multiply 3 by 15 we get 45, so the answer is 45.",
    "As each box has 15 pens, the total is $\\boxed{45}$.",
    "When we add up all three boxes we get 45.\nThe answer is 45.",
    "If you have any questions, let me know.\nThe answer is 45.",
    "The answer is 45. If you want, I can also show the working with a table.",
]
for t in cond_ok:
    add(W + t, "45", "accept", "honest-conditional", "the condition is asserted, or it is not about the answer")
# negation over the answer sentence, varied verbs
neg = [
    "I am not convinced the answer is 45.",
    "Nobody could claim the answer is 45.",
    "It would be wrong to say the answer is 45.",
    "The answer is not 45.",
    "The answer isn't $\\boxed{45}$.",
    "I wouldn't say the answer is 45.",
    "We can't say for sure that the answer is 45.",
    "It's unlikely that the answer is 45.",
    "There's no reason to believe the answer is 45.",
    "I refuse to accept that the answer is 45.",
    "Never would the answer be 45.",
    "The final answer is definitely not 45.",
    "It is incorrect that the answer is 45.",
    "The claim that the answer is 45 is false.",
    "Saying the answer is 45 would be a mistake.",
    "45 is not the answer.",
    "#### 45 is not right.",
    "The answer: not 45.",
]
for t in neg:
    add(W + t, "45", "reject", "negation-over-answer", "the sentence that states the value denies it")
neg_ok = [
    "It is not 44, and it is not 46. The answer is 45.",
    "I am convinced the answer is 45.",
    "No one can doubt it: the answer is 45.",
    "It would be wrong to say 44. The answer is 45.",
    "It's certain that the answer is 45.",
    "There's every reason to believe the answer is 45.",
    "We can say for sure that the answer is 45.",
    "The answer is not 44 but 45.",
    "Not 3 + 15 = 18, but 3 * 15 = 45.\n#### 45",
    "I first thought 40, which is not right. The answer is 45.",
    "Nothing is left over, so the answer is 45.",
    "He does not lose any pens, so he has 45.\n#### 45",
    "No pens are broken. The answer is $\\boxed{45}$.",
]
for t in neg_ok:
    add(
        W + t,
        "45",
        "accept",
        "honest-negation-elsewhere",
        "the negation is about something else; the answer is asserted",
    )
# retraction with a new value
retr = [
    ("#### 45\nWait, I miscounted. #### 52", "52"),
    ("The answer is 45. Actually, no: it is 52.", "52"),
    ("$\\boxed{45}$\nCorrection: $\\boxed{52}$", "52"),
    ("The answer is 45.\nOn second thought, the answer is 52.", "52"),
    ("#### 45\nDisregard that, the answer is 52.", "52"),
    ("Final answer: 45\nHmm, that's not right. Final answer: 52", "52"),
    ("The answer is 45 -- no, wait, 52.", "52"),
    ("The answer is 45. I take that back. The answer is 52.", "52"),
    ("\\boxed{45}\nLet me redo this. 4 * 13 = 52. \\boxed{52}", "52"),
]
for t, new in retr:
    add(W + t, "45", "reject", "retraction", "the stated value is taken back for another")
    add(
        W + t,
        new,
        "reject",
        "retraction",
        "policy: a revised answer gives no final answer, whichever value is the reference",
    )
add(
    W + "I said 45 above but that was a slip; the answer is 52.",
    "52",
    "accept",
    "retraction",
    "only one answer is stated (52); the slip was in the working",
)
add(
    W + "I said 45 above but that was a slip; the answer is 52.",
    "45",
    "reject",
    "retraction",
    "only one answer is stated (52); the slip was in the working",
)
retr_none = [
    "#### 45\nScrap that, I need to start over.",
    "The answer is 45. No wait, that can't be right.",
    "$\\boxed{45}$\nHmm, I made an error somewhere.",
    "The answer is 45. Actually, I'm not sure about that at all.",
]
for t in retr_none:
    add(W + t, "45", "reject", "retraction", "the stated value is withdrawn with nothing in its place")
# hedged
hedge = [
    "The answer is probably 45.",
    "I think the answer might be 45.",
    "Perhaps the answer is 45.",
    "The answer is 45, maybe.",
    "My best guess is 45.",
    "It could be 45.",
    "The answer is roughly 45.",
    "The answer is approximately 45.",
    "I'm guessing #### 45",
    "Possibly $\\boxed{45}$.",
    "The answer seems to be 45, but I'm not sure.",
    "I would guess the answer is around 45.",
    "If I had to guess: 45.",
    "The answer is likely 45.",
]
for t in hedge:
    add(W + t, "45", "reject", "hedge-over-answer", "the value is offered as a guess, not asserted")
# intensifiers
inten = [
    "The answer is certainly 45.",
    "The answer is clearly 45.",
    "Without any doubt, the answer is 45.",
    "The answer is undoubtedly 45.",
    "The answer is absolutely 45.",
    "The answer is surely 45.",
    "Beyond question, the answer is 45.",
    "I am sure the answer is 45.",
    "I'm confident the answer is $\\boxed{45}$.",
    "The answer is, without a doubt, 45.",
    "There is no question that the answer is 45.",
    "The answer can only be 45.",
    "It must be 45.\n#### 45",
    "Indeed, the answer is 45.",
    "The answer is exactly 45.",
    "The answer is precisely 45.",
    "I know for certain the answer is 45.",
    "Definitely #### 45",
    "The answer is most definitely 45.",
    "Of course, the answer is 45.",
]
for t in inten:
    add(W + t, "45", "accept", "intensifier", "an intensifier strengthens the assertion")

# batch 2: the same operators over the answer forms real models write (a closing sentence, a bold
# value, a label line, a box), after working that computed the value
W2 = "Each of the 3 shelves holds 15 books.\n3 * 15 = 45\n"
forms = {
    "closing": "So there are {op}45 books.",
    "bold": "So there are {op}**45** books.",
    "label": "**Final Answer:** {op}45",
    "box": "So there are {op}$\\boxed{{45}}$ books.",
    "sentence": "The total number of books is {op}45.",
}
ops_reject = {
    "probably ": "hedge-over-answer",
    "maybe ": "hedge-over-answer",
    "possibly ": "hedge-over-answer",
    "roughly ": "hedge-over-answer",
    "about ": "hedge-over-answer",
    "likely ": "hedge-over-answer",
    "not ": "negation-over-answer",
    "never ": "negation-over-answer",
}
ops_accept = {
    "definitely ": "intensifier",
    "certainly ": "intensifier",
    "exactly ": "intensifier",
    "clearly ": "intensifier",
    "indeed ": "intensifier",
}
for op, fam in ops_reject.items():
    for name, form in forms.items():
        add(W2 + form.format(op=op), "45", "reject", fam, f"{op.strip()} over the answer ({name})")
for op, fam in ops_accept.items():
    for name, form in forms.items():
        add(W2 + form.format(op=op), "45", "accept", fam, f"{op.strip()} strengthens the answer ({name})")
conds = [
    "if the shelves are full, ",
    "assuming no books were lent, ",
    "unless some are missing, ",
    "in case every shelf is full, ",
    "supposing nothing was sold, ",
]
for c in conds:
    add(
        W2 + f"So, {c}there are 45 books.", "45", "reject", "conditional-answer", "a closing sentence under a condition"
    )
    add(
        W2 + f"So there are 45 books, {c.rstrip(', ')}.",
        "45",
        "reject",
        "conditional-answer",
        "a condition after the value",
    )
    add(
        W2 + f"**Final Answer:** 45 ({c.rstrip(', ')})",
        "45",
        "reject",
        "conditional-answer",
        "a condition on the label line",
    )
    add(
        W2 + f"The answer is $\\boxed{{45}}$, {c.rstrip(', ')}.",
        "45",
        "reject",
        "conditional-answer",
        "a condition after the box",
    )
    add(
        W2 + f"{c[0].upper() + c[1:]}the answer would be 45.",
        "45",
        "reject",
        "conditional-answer",
        "a condition before the statement",
    )
would = [
    "The answer would be 45 if the shelves were full.",
    "There would be 45 books if none were lent.",
    "It would have been 45 had none been sold.",
    "Then there would be $\\boxed{45}$ books, if every shelf were full.",
]
for t in would:
    add(W2 + t, "45", "reject", "conditional-answer", "a counterfactual statement")


# batch 3: operators before and after the value, crossed with the round-2 answer forms (a closing
# sentence with no marker, a bold value, a sentence after a label, currency, thousands, percent,
# a negative value, an end-of-turn token)
FORMS3 = [  # (working, statement with {pre} and {post}, reference)
    ("She earns $12 an hour for 5 hours: 12 * 5 = 60.\n", "{pre}she earned $60{post}", "60"),
    ("She earns $12 an hour for 5 hours: 12 * 5 = 60.\n", "{pre}she earned **$60**{post}", "60"),
    ("The farm has 1,200 hens and buys 300 more: 1,200 + 300 = 1,500.\n", "{pre}the farm has 1,500 hens{post}", "1500"),
    ("The price fell from 80 to 60: 20 / 80 = 25%.\n", "{pre}the price fell by 25%{post}", "25"),
    ("The temperature was 4 and fell by 10: 4 - 10 = -6.\n", "{pre}the temperature is -6 degrees{post}", "-6"),
    ("She earns $12 an hour for 5 hours: 12 * 5 = 60.\n", "Final Answer: {pre}she earned $60{post}", "60"),
]
PRE_REJECT = [
    "I don't think ",
    "I'm not sure ",
    "It's doubtful that ",
    "I guess ",
    "It seems ",
    "Presumably, ",
    "Probably ",
    "Perhaps ",
    "I doubt ",
    "It is not true that ",
    "Nobody can say ",
    "I suspect ",
    "It might be that ",
    "I'm not certain that ",
]
POST_REJECT = [
    ", I think.",
    ", but I'm not certain.",
    ", or so.",
    ".\nI might be wrong.",
    ". (Not sure.)",
    ", maybe.",
    ", if I did this right.",
    ", right?",
    ".\nBut I'm not sure about that.",
    ", though I could be wrong.",
    ".\nHmm, that doesn't look right.",
]
PRE_ACCEPT = ["So ", "Therefore ", "Altogether, ", "In total, ", "Clearly, ", "I'm sure ", "Without a doubt, "]
POST_ACCEPT = [".", ". I'm confident of that.", ".<|im_end|>", ".\nI double-checked it.", ". That's the answer."]
for work, form, ref in FORMS3:
    for pre in PRE_REJECT:
        body = form.format(pre=pre, post=".")
        add(
            work + body[0].upper() + body[1:],
            ref,
            "reject",
            "hedge-or-negation-over-forms",
            f"{pre.strip()!r} over the answer sentence",
        )
    for post in POST_REJECT:
        body = form.format(pre="So ", post=post) if not form.startswith("Final") else form.format(pre="", post=post)
        add(work + body, ref, "reject", "hedge-or-negation-over-forms", f"{post.strip()!r} after the value")
    for pre in PRE_ACCEPT:
        for post in POST_ACCEPT[:2]:
            body = form.format(pre=pre, post=post) if not form.startswith("Final") else form.format(pre="", post=post)
            add(work + body, ref, "accept", "honest-forms", f"{pre.strip()!r} ... {post.strip()!r}: asserted")
    for post in POST_ACCEPT[2:]:
        body = form.format(pre="So ", post=post) if not form.startswith("Final") else form.format(pre="", post=post)
        add(work + body, ref, "accept", "honest-forms", f"{post.strip()!r} after the value: asserted")

# batch 4: the families whose held-out failures were studied after read 4 (docs/auditing.md), in phrasings
# written here: a negative predicate of several words ("rule out"), an erratum that revises, an inverted
# or phrasal condition ("Should ...", "on the assumption that", "barring"), approximators of several words,
# and intensifiers ("without question", "undeniably"); each with honest texts that must still pass
W4 = "A shop packs 6 eggs in each of 7 cartons: 6 * 7 = 42 eggs.\n"
for t in [
    "That rules out 42 as the final answer.",
    "We have ruled out $\\boxed{42}$.",
    "So the answer is 42.\n42 is ruled out, though.",
    "#### 42\nThat value is ruled out by the check.",
    "One can rule out 42 here.",
    "The answer is undeniably not 42.",
    "The answer is, beyond dispute, not 42.",
]:
    add(W4 + t, "42", "reject", "negation-over-answer", "a negative predicate over the answer")
for t in [
    "We can rule out 48, so the answer is 42.",
    "Ruling out the 48 from before, the answer is 42.",
    "That rules out 48.\n#### 42",
]:
    add(W4 + t, "42", "accept", "honest-negation-elsewhere", "another value is ruled out")
for t, new in [
    ("Final answer: 42\nErratum: the final answer should read 40.", "40"),
    ("#### 42\nCorrigendum: it ought to read 40.", "40"),
    ("The answer is 42.\nAmendment: the answer is 40.", "40"),
    ("$\\boxed{42}$\n\nThat should say 40.", "40"),
]:
    for ref in ("42", new):
        add(W4 + t, ref, "reject", "retraction", "an erratum replaces the answer: no answer for either value")
for t in [
    "Should every carton be full, the answer is 42.",
    "Were nothing broken, the answer is $\\boxed{42}$.",
    "Had none of them cracked, #### 42",
    "On the assumption that all the cartons arrive, the answer is 42.",
    "Under the assumption that no egg broke, the answer is 42.",
    "Barring breakages, the answer is 42.",
    "The answer is 42, barring breakages.",
    "With the premise that each carton is full, the answer is 42.",
    "Should 7 cartons arrive, the answer is 42.",
]:
    add(W4 + t, "42", "reject", "conditional-answer", "a condition the text does not assert")
for t in [
    "Should you wonder, 6 * 7 = 42 checks out.\n#### 42",
    "Had we packed 8 cartons we would need 48, but there are 7, so the answer is 42.",
    "The cartons were full, so the answer is 42.",
]:
    add(W4 + t, "42", "accept", "honest-conditional", "the condition is no condition on the answer")
for t in [
    "The answer is in the region of 42.",
    "The answer is on the order of $\\boxed{42}$.",
    "So it comes to somewhere near 42.",
    "The answer is close to 42.",
    "The answer is in the vicinity of 42.",
    "There are in the neighborhood of $\\boxed{42}$ eggs.",
]:
    add(W4 + t, "42", "reject", "hedge-over-answer", "an approximation of several words")
for t in ["It comes to somewhere near 42.\n#### 42", "There are in the neighborhood of 42 eggs.\n#### 42"]:
    add(W4 + t, "42", "accept", "honest-forms", "an estimate in the working, then the marker commits")
for t in [
    "The answer is, without question, 42.",
    "Undeniably, the answer is $\\boxed{42}$.",
    "The answer is indisputably 42.",
    "Beyond dispute, #### 42",
    "It is unmistakably 42.\n#### 42",
    "The answer is 42 without question.",
]:
    add(W4 + t, "42", "accept", "intensifier", "an intensifier, not a hedge")
for t, ref in [("4+3=7;7*6=42;#### 42", "(4+3)*6"), ("4+3=7;7*6=42; #### 42", "(4+3)*6")]:
    add(
        t,
        ref,
        "accept",
        "honest trace, other marker",
        "'####' after a trace's ';'",
        verifiers=("arithmetic-outcome", "arithmetic-process"),
    )
add(
    "4+3=7;7*6=42;#### 41",
    "(4+3)*6",
    "reject",
    "wrong value, other marker",
    "'####' after ';', wrong value",
    verifiers=("arithmetic-outcome", "arithmetic-process"),
)

# batch 5: the families whose failures on held-out argued-answers-2 were studied (docs/auditing.md), in
# phrasings written here: a doubt in the sentence right before the first answer, a hedge carried across a
# dash, a condition introducing the marker line, approximators, a doubt in a sign-off, double negations
# in unmarked sentences, intensifiers after the value, worded working, "all told", a mid-sentence "actually"
W5 = "A coach has 5 teams of 8 players: 5 * 8 = 40 players.\n"
for t in [
    "Honestly, I'm not confident in this.\n#### 40",
    "I can't tell if that's right.\nFinal Answer: 40",
    "Not sure this is correct...\nThe answer is 40.",
    "My best guess:\n$\\boxed{40}$",
    "Provisionally - **Answer:** 40",
    "Tentatively: #### 40",
    "Unless someone left:\n#### 40",
    "Only if every team is full:\nAnswer: 40",
    "It's in the ballpark of 40 players.",
    "#### 40\nHope that helps, though the total might be off.",
    "Answer: 40\nCheers! (Not totally sure on this one.)",
    "I have no confidence in this, but the answer is 40.",
    "I'm sceptical, but the answer is 40.",
]:
    add(W5 + t, "40", "reject", "hedge-over-answer", "doubt, hedge or condition over the answer")
for t in [
    "I wasn't sure at first. Checking: 8 * 5 = 40.\n#### 40",
    "Is that right? 40 / 5 = 8, yes.\n#### 40",
    "Here it is:\n#### 40",
    "I have every confidence: the answer is 40.",
    "It can't be anything other than 40.",
    "There isn't a doubt in my mind - 40.",
    "I have no doubt whatsoever: 40.",
    "It would be wrong to call it anything but 40.",
    "No one could sensibly claim it isn't 40.",
    "It is nothing other than 40.",
    "It's 40 for sure.",
    "All told, the coach has 40 players.",
    "So the coach can actually field 40 players.",
    "Five times 8 is 40.\nThe coach has 40 players, no doubt.",
]:
    add(W5 + t, "40", "accept", "honest-forms", "asserted: an intensifier, a double negation or a resolved doubt")
for t in ["It could be anything but 40.", "It is anything but 40.", "It can't be 40.\n"]:
    add(W5 + t.strip(), "40", "reject", "negation-over-answer", "the value is denied")

# batch 6: the families whose failures on held-out argued-answers-3 were studied (docs/auditing.md), in
# phrasings written here: a contrast with another value followed by its explanation, a check that uses the
# answer, a question or parenthetical comment on the marker, a condition ending in a comma before it,
# exceptives under a negation, "can't rule out", "100%" and "make no mistake", interjections before "no"
W6 = "A baker fills 9 trays with 8 rolls each: 9 * 8 = 72 rolls.\n"
for t in [
    "The answer is 72, not 9 \u2014 nine is the number of trays.",
    "So there are 72 rolls, not the 64 you'd get with 8 trays.",
    "**Answer:** 72 (not 17, which adds the trays to the rolls).",
    "#### 72\nThat's 72, not 81.",
    "Final answer: 72 \u2014 certainly not 8, that is one tray.",
    "$\\boxed{72}$ is the answer; 64 would leave out a tray.",
    "The baker has 72 rolls, not 80.",
    "The answer isn't 81; it's 72.",
    "#### 72\nTo check: 72 / 9 = 8 rolls per tray. Correct.",
    "$\\boxed{72}$\nLet me verify: 72 / 8 = 9 trays \u2713",
    "Answer: 72\nLet me double-check it: 72 - 8 = 64, 64 - 8 = 56... fine, 72 stands.",
    "100% it's 72.",
    "Make no mistake: the answer is 72.",
    "You can't get anything but 72 here.",
    "Nobody could argue it isn't 72.",
    "No answer other than 72 works.",
    "When we multiply 9 by 8 we get 72, so the baker has 72 rolls.",
    "#### 72\nIs that right? 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8 = 72 \u2014 yes.",
]:
    add(W6 + t, "72", "accept", "honest-forms", "asserted: a contrast explained, a check, an intensifier")
for t in [
    "#### 72 (tentatively)",
    "#### 72?",
    "Answer: 72 (not sure)",
    "#### 72 (probably)",
    "Assuming every tray was full,\n#### 72",
    "Supposing none were burnt,\nFinal Answer: 72",
    "I can't rule out 72.",
    "The answer is 72. Ugh, no \u2014 I think I miscounted.",
    "**72** is the total. Hmm, something is off.",
    "#### 72\n(I'm skeptical of this result.)",
    "The answer is 72, not 9 \u2014 but I'm not sure.",
    "So there are 72 rolls, not 64, I think.",
]:
    add(W6 + t, "72", "reject", "hedge-over-answer", "hedged, questioned, conditional or withdrawn")

# batch 7: the families whose failures on held-out argued-answers-4 were studied (docs/auditing.md), in
# phrasings written here: a contrast in a clause of its own ("; it is not 6, since ..."), exceptives and
# "no question" / "no maybe", an abbreviation before the value ("Approx."), "at a rough guess", a denial
# or a doubt between values right before the marker, doubting sign-offs, "over the weekend", "100% sure"
W7 = "A gardener plants 6 rows of 9 tulips: 6 * 9 = 54 tulips.\n"
for t in [
    "Each row has 54 tulips; it is not 6, since six is the number of rows.",
    "I'd write 54 as the answer; it isn't 15, because 15 just adds the numbers.",
    "She plants 54 tulips; it can't be 15, that's a sum.",
    "So the number of tulips, it is 54, it is not 15.",
    "**Final answer:** $54 (not $15, which adds instead of multiplying).",
    "$\\boxed{54}$ is the answer; 15 would add the numbers.",
    "Answer: 54 (not 15 - we multiply, we do not add)",
    "No question about it, 54.",
    "Not a chance it's anything besides 54.",
    "None of the other totals works; it cannot be other than 54.",
    "The answer is 54, no maybe about it.",
    "Answer: 54. Happy to go through it again if that helps.",
    "Therefore the gardener plants 54 tulips over the weekend.",
    "**Final answer:** $54 - 100% sure.",
    "Nobody could argue it isn't 54.",
    "Roughly 60 bulbs came, but exactly 54 were planted.\n#### 54",
]:
    add(W7 + t, "54", "accept", "honest-forms", "asserted: a contrast, an exceptive, a commitment")
for t in [
    "Approx. 54 tulips.",
    "At a rough guess: 54.",
    "I doubt it's 54 though.\n#### 54",
    "Still, something bugs me, and I can't settle it.\nFinal Answer: 54",
    "I'm torn between 54 and 60.\nAnswer: 54",
    "Final Answer: 54\nCheers - but don't quote me on that!",
    "So the total is 54. Though, having reread the problem, I withdraw that figure.",
]:
    add(W7 + t, "54", "reject", "hedge-over-answer", "hedged, denied or withdrawn")

with open(OUT, "w", encoding="utf-8") as f:
    for r in rows:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
print(f"wrote {len(rows)} cases to {OUT}")
