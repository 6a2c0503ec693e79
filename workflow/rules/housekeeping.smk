# Housekeeping before Snakemake plans the run (nqf.pipeline.housekeeping.before_run): results files
# that are not what they claim to be are moved aside and handed to Snakemake as forced, so that
# this run regenerates them, and the temporary files of killed writes are removed; only in the main
# snakemake process, and only when this call will run jobs and holds nqf's lock on results/ (a dry
# run changes nothing and only says what a run would do). After a successful run, the results
# record (nqf.pipeline.results_record) is brought up to date.
from nqf.pipeline import housekeeping as nqf_housekeeping
from nqf.pipeline import results_record as nqf_results_record

nqf_housekeeping.before_run(workflow, EXPERIMENTS, sys.argv)


onsuccess:
    nqf_results_record.update("results")
