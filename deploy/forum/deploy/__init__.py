"""Running Forum: the local-cluster launcher, the demo workload and the history
checker it reports with. (Dockerfile, Compose and Kubernetes files live here too.)"""
