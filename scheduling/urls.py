"""Page routes of scheduling, mounted by console.urls."""

from django.urls import path

from scheduling import views

urlpatterns = [
    path("jobs/", views.job_list_page, name="jobs-page"),
    path("jobs/new/", views.job_submit_page, name="job-submit-page"),
    path("jobs/new/estimate/", views.job_estimate, name="job-estimate"),
    path("jobs/<int:pk>/", views.job_detail_page, name="job-page"),
    path("jobs/<int:pk>/cancel/", views.job_cancel_page, name="job-cancel-page"),
]
