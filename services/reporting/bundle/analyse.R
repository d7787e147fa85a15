# The pre-registered analysis in R, run on a data export (the zip unpacked into a folder):
#   Rscript analyse.R EXPORT_FOLDER [outcomes_r.csv]
# Needs R with lme4, lmerTest and jsonlite. It follows analysis.py (the platform's report) step by step:
# the same scale scores (mean of a scale's rating items per participant and task, participants flagged by
# report.exclude_flags left out), the same checks before fitting, the same model
#   score ~ condition * task + (1 | participant)   (REML; lm(score ~ condition) for a scale asked at one task)
# and the same contrast (a condition minus the reference, averaged over the scale's tasks). The estimates agree
# with analysis.py's; the intervals and p differ a little by design: lmerTest gives Satterthwaite t tests where
# statsmodels gives Wald z tests.
suppressPackageStartupMessages({
  library(jsonlite)
  library(lme4)
  library(lmerTest)
})

args <- commandArgs(trailingOnly = TRUE)
if (length(args) < 1) stop("usage: Rscript analyse.R EXPORT_FOLDER [outcomes_r.csv]")
folder <- args[1]
out <- if (length(args) >= 2) args[2] else "outcomes_r.csv"
MIN_PER_CONDITION <- 3

read_table <- function(name) {
  read.csv(file.path(folder, name), colClasses = "character", encoding = "UTF-8", check.names = FALSE,
           na.strings = character(0))
}
study <- fromJSON(file.path(folder, "study_config.json"), simplifyVector = FALSE)
conditions <- unlist(study$enabled_conditions)
reference <- study$report$reference_condition
if (is.null(reference)) reference <- conditions[1]
flags <- if (!is.null(study$report) && "exclude_flags" %in% names(study$report)) unlist(study$report$exclude_flags) else "attention_failures"
tasks_all <- vapply(study$tasks, function(t) t$id, "")

participants <- read_table("participants.csv")
answers <- read_table("questionnaires_long.csv")
excluded <- character(0)
for (flag in flags) {
  if (flag %in% names(participants)) {
    value <- suppressWarnings(as.numeric(participants[[flag]]))
    excluded <- union(excluded, participants$participant_code[!is.na(value) & value > 0])
  }
}

item_scale <- c()
for (name in names(study$instruments)) {
  for (item in study$instruments[[name]]$items) {
    type <- if (is.null(item$type)) "likert" else item$type
    if (type %in% c("likert", "ios")) item_scale[item$id] <- name
  }
}

answers$value_num <- suppressWarnings(as.numeric(sub("^'", "", answers$value)))
keep <- answers$item_id %in% names(item_scale) & !is.na(answers$value_num) &
  answers$memory_group %in% conditions & !(answers$participant_code %in% excluded)
a <- answers[keep, ]
a$scale <- unname(item_scale[a$item_id])
scores <- aggregate(value_num ~ scale + participant_code + memory_group + task_id, data = a, FUN = mean)
names(scores) <- c("scale", "participant", "condition", "task", "score")

rows <- list()
for (scale in unique(unname(item_scale))) {
  d <- scores[scores$scale == scale, ]
  if (nrow(d) == 0) next
  counts <- tapply(d$participant, d$condition, function(x) length(unique(x)))
  groups <- conditions[conditions %in% names(counts)]
  tasks <- tasks_all[tasks_all %in% d$task]
  problem <- NULL
  if (!(reference %in% groups)) problem <- paste("no scores in the reference condition", reference)
  else if (length(groups) < 2) problem <- "one condition only"
  else if (any(counts[groups] < MIN_PER_CONDITION)) problem <- "too few participants"
  else if (any(table(factor(d$condition, groups), factor(d$task, tasks)) == 0)) problem <- "empty condition x task cell"
  if (!is.null(problem)) {
    message(scale, ": no model: ", problem)
    next
  }
  groups <- c(reference, setdiff(groups, reference))
  d$condition <- factor(d$condition, levels = groups)
  d$task <- factor(d$task, levels = tasks)
  others <- groups[-1]
  if (length(tasks) == 1) {
    fit <- lm(score ~ condition, data = d)
    table <- summary(fit)$coefficients
    ci <- confint(fit)
    sd_total <- sigma(fit)
    for (g in others) {
      term <- paste0("condition", g)
      rows[[length(rows) + 1]] <- data.frame(
        scale = scale, contrast = paste0(g, "-", reference), estimate = table[term, 1], ci_low = ci[term, 1],
        ci_high = ci[term, 2], p = table[term, 4], n = unname(counts[g] + counts[reference]),
        effect_size = table[term, 1] / sd_total, df = fit$df.residual, model = "ols")
    }
    next
  }
  fit <- lmer(score ~ condition * task + (1 | participant), data = d, REML = TRUE)
  beta <- fixef(fit)
  variance <- as.data.frame(VarCorr(fit))$vcov
  sd_total <- sqrt(sum(variance))
  for (g in others) {
    L <- setNames(rep(0, length(beta)), names(beta))
    L[paste0("condition", g)] <- 1
    for (t in tasks[-1]) {
      L[paste0("condition", g, ":task", t)] <- L[paste0("condition", g, ":task", t)] + 1 / length(tasks)
    }
    test <- contest(fit, matrix(L, nrow = 1), joint = FALSE, confint = TRUE)
    rows[[length(rows) + 1]] <- data.frame(
      scale = scale, contrast = paste0(g, "-", reference), estimate = test$Estimate, ci_low = test$lower,
      ci_high = test$upper, p = test[["Pr(>|t|)"]], n = unname(counts[g] + counts[reference]),
      effect_size = test$Estimate / sd_total, df = test$df, model = "mixed")
  }
}
result <- do.call(rbind, rows)
write.csv(result, out, row.names = FALSE)
print(result, row.names = FALSE)
