"""The tutorial's exercises and the results: the variants (ablation), the report and its
parts (report, report_data, report_schedules, reference, roofline_table), the results page,
exercise 5's timing (devices_timing), the code-equivalence check, the published weights."""
