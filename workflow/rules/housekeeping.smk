# Housekeeping before Snakemake plans the run (nqf.pipeline.housekeeping.before_run): results files
# that are not what they claim to be are moved aside and handed to Snakemake as forced, so that
# this run regenerates them, and the temporary files of killed writes are removed; only in the main
# snakemake process, and only when this call will run jobs and holds nqf's lock on results/ (a dry
# run changes nothing and only says what a run would do). After a successful run, the results
# record (nqf.pipeline.results_record) is brought up to date.
#
# When this process runs the jobs itself, they run in forks of one warm process that has imported
# torch, xarray and matplotlib once (nqf.pipeline.job_server; NQF_JOB_SERVER=off turns it off): it
# starts with the run and stops with it.
from nqf.pipeline import housekeeping as nqf_housekeeping
from nqf.pipeline import job_server as nqf_job_server
from nqf.pipeline import results_record as nqf_results_record

nqf_housekeeping.before_run(workflow, EXPERIMENTS, sys.argv)


onstart:
    nqf_snakefile.start_job_server(workflow, NQF.jobs_run_here)


onsuccess:
    nqf_job_server.stop()
    nqf_snakefile.end_scheduler_wakeups()
    nqf_results_record.update("results")
